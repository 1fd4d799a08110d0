//! Who is asking and what they may do. [`auth`] checks every request's bearer token (the admin
//! token, the join token, a member's credential) and records its [`auth::Principal`];
//! [`authz`] says what a member agent's credential reaches; [`registration`] says what a pull
//! member's credential is, where it is stored and when it is revoked; [`credential_feed`]
//! keeps this server's credentials in step with the store, so every server of a fleet knows
//! the same ones.
//!
//! The floor of the API: it imports no other wing, only the API's state and error type.

pub mod auth;
pub mod authz;
pub mod credential_feed;
pub mod registration;
