//! The numbered migrations, oldest first.

use crate::{Migration, RawStore};

/// Every migration, in order; `MIGRATIONS[i].number == i + 1`.
pub const MIGRATIONS: &[Migration] = &[];

#[allow(dead_code)]
fn _assert_object_safe(_: &mut dyn RawStore) {}
