//! Store migrations.
