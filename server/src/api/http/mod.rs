//! The envelope of every request, before any wing reads what it asks: connections served at
//! once and the HTTP/1 error heads ([`transport`]), body size and read deadlines, the request
//! deadline and `Status` bodies on every error answer ([`limits`]), the blocking pool for work
//! that grows with the store ([`off_thread`]), the raw path split into checked segments
//! ([`path`]) and the query parameters and `DeleteOptions` checked before anything is read or
//! written ([`options`]).
//!
//! Imports no other wing, only the API's error type.

pub mod limits;
pub mod off_thread;
pub mod options;
pub mod path;
pub mod transport;
