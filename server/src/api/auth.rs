//! Bearer-token authentication. The server's admin token (written to `<data-dir>/admin.token`
//! at first start) may do everything; every API call must carry `Authorization: Bearer
//! <token>` except the public probes (`/healthz`, `/readyz`, `/version`). Tokens are compared
//! in constant time and never logged.

use super::error::ApiError;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use rand::RngCore;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// The holder of the admin token.
    Admin,
}

/// Checks bearer tokens.
#[derive(Clone)]
pub struct Authenticator {
    admin_token: Arc<String>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authenticator { .. }")
    }
}

impl Authenticator {
    /// An authenticator that accepts `admin_token` as the admin.
    pub fn new(admin_token: String) -> Self {
        Self {
            admin_token: Arc::new(admin_token),
        }
    }

    /// The principal a bearer token stands for.
    pub fn authenticate(&self, token: &str) -> Option<Principal> {
        let a = token.as_bytes();
        let b = self.admin_token.as_bytes();
        if a.len() == b.len() && bool::from(a.ct_eq(b)) {
            Some(Principal::Admin)
        } else {
            None
        }
    }
}

/// A fresh random token: 32 bytes, hex.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Paths anyone may call.
pub fn is_public(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/livez" | "/version")
}

/// Middleware: rejects requests without a valid bearer token (401) and records the principal
/// in the request's extensions for handlers.
pub async fn require_token(
    State(auth): State<Authenticator>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if is_public(req.uri().path()) {
        return Ok(next.run(req).await);
    }
    let token = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let principal = token
        .and_then(|t| auth.authenticate(t))
        .ok_or(ApiError::Unauthorized)?;
    req.extensions_mut().insert(principal);
    Ok(next.run(req).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_is_admin() {
        let token = generate_token();
        assert_eq!(token.len(), 64);
        let auth = Authenticator::new(token.clone());
        assert_eq!(auth.authenticate(&token), Some(Principal::Admin));
        assert_eq!(auth.authenticate(&token[..63]), None);
        assert_eq!(auth.authenticate(""), None);
        assert_eq!(auth.authenticate(&generate_token()), None);
        assert!(!format!("{auth:?}").contains(&token));
    }
}
