//! The checks in front of the MCP endpoint: `Host`, `Origin`, the bearer token and the path,
//! in that order, for every request whatever its method.

use super::loopback::Loopback;
use super::{Body, HttpOptions, PATH, text};
use http::{Request, Response, StatusCode, header};
use std::net::SocketAddr;
use subtle::ConstantTimeEq;

/// The checks in front of the MCP endpoint, for every request whatever its method.
pub(super) struct Guard {
    token: String,
    loopback: Loopback,
}

impl Guard {
    pub(super) fn new(options: &HttpOptions, local: SocketAddr) -> Self {
        let loopback = Loopback::new(local, &options.allow_origins);
        Self {
            token: options.token.clone(),
            loopback: if options.allow_remote {
                loopback.any_host()
            } else {
                loopback
            },
        }
    }

    pub(super) fn check<B>(&self, request: &Request<B>) -> Result<(), Refusal> {
        self.loopback.check_host(request).map_err(|(status, why)| {
            let why = if status == StatusCode::FORBIDDEN {
                "this Host is not the server's: a loopback name is expected (start the server \
                 with --allow-remote to take requests for other names)"
            } else {
                why
            };
            Refusal(status, why)
        })?;
        self.loopback
            .check_origin(request, false)
            .map_err(|(status, _)| {
                Refusal(
                    status,
                    "this Origin may not use the server; start it with --allow-origin to allow it",
                )
            })?;
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer);
        let authorized =
            presented.is_some_and(|t| bool::from(t.as_bytes().ct_eq(self.token.as_bytes())));
        if !authorized {
            return Err(Refusal(
                StatusCode::UNAUTHORIZED,
                "send Authorization: Bearer <token>, with the token warden printed or was given",
            ));
        }
        if request.uri().path() != PATH {
            return Err(Refusal(StatusCode::NOT_FOUND, "the MCP endpoint is /mcp"));
        }
        Ok(())
    }
}

/// A request the guard turns away, and why.
pub(super) struct Refusal(StatusCode, &'static str);

impl Refusal {
    /// The refusal, closing the connection: a client that was turned away gets no
    /// connection kept open for it.
    pub(super) fn response(self) -> Response<Body> {
        let Refusal(status, message) = self;
        let mut response = text(status, message);
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// The token of a `Bearer` credential (the scheme is case-insensitive).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::tests::options;
    use http::Method;

    fn guard() -> Guard {
        Guard::new(&options(false), "127.0.0.1:8123".parse().unwrap())
    }

    /// A request with these headers, and `Host` the server's unless they name one.
    fn request(headers: &[(&str, &str)], path: &str) -> Request<()> {
        let mut r = Request::builder().uri(path);
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            r = r.header("host", "127.0.0.1:8123");
        }
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(()).unwrap()
    }

    #[test]
    fn host_is_checked_for_every_method() {
        let g = guard();
        let token = format!("Bearer {}", "t".repeat(32));
        for method in [Method::POST, Method::GET, Method::DELETE] {
            for (host, want) in [
                ("127.0.0.1:8123", 200),
                ("localhost:8123", 200),
                ("LocalHost", 200),
                ("[::1]:8123", 200),
                ("evil.example:8123", 403),
                ("127.0.0.1.evil.example", 403),
                ("a b", 400),
            ] {
                let mut r = request(&[("authorization", &token), ("host", host)], "/mcp");
                *r.method_mut() = method.clone();
                assert_eq!(status(g.check(&r)), want, "{method} {host}");
            }
        }
        let mut r = request(&[("authorization", &token)], "/mcp");
        r.headers_mut().remove(header::HOST);
        assert_eq!(status(g.check(&r)), 400, "no Host");

        // Without even the token, a foreign Host learns nothing more.
        assert_eq!(
            status(g.check(&request(&[("host", "evil.example")], "/mcp"))),
            403
        );
        let remote = Guard::new(&options(true), "0.0.0.0:8123".parse().unwrap());
        let r = request(
            &[("authorization", &token), ("host", "mcp.example")],
            "/mcp",
        );
        assert_eq!(status(remote.check(&r)), 200, "remote clients allowed");
    }

    #[test]
    fn refusals_close_their_connection() {
        let response = guard().check(&request(&[], "/mcp")).unwrap_err().response();
        assert_eq!(response.headers()[header::CONNECTION], "close");
    }

    fn status(r: Result<(), Refusal>) -> u16 {
        r.map_or_else(|e| e.response().status().as_u16(), |()| 200)
    }

    #[test]
    fn token_origin_and_path() {
        let g = guard();
        let token = format!("Bearer {}", "t".repeat(32));
        assert_eq!(status(g.check(&request(&[], "/mcp"))), 401);
        let wrong = format!("Bearer {}", "u".repeat(32));
        assert_eq!(
            status(g.check(&request(&[("authorization", &wrong)], "/mcp"))),
            401
        );
        let ok = [("authorization", token.as_str())];
        assert_eq!(status(g.check(&request(&ok, "/mcp"))), 200);
        assert_eq!(status(g.check(&request(&ok, "/other"))), 404);
        let lower = format!("bearer {}", "t".repeat(32));
        assert_eq!(
            status(g.check(&request(&[("authorization", &lower)], "/mcp"))),
            200
        );
        for (origin, want) in [
            ("http://localhost:8123", 200),
            ("http://127.0.0.1:8123", 200),
            ("https://app.example.com", 200),
            ("http://localhost:9999", 403),
            ("https://evil.example", 403),
            ("null", 403),
        ] {
            let headers = [("authorization", token.as_str()), ("origin", origin)];
            assert_eq!(
                status(g.check(&request(&headers, "/mcp"))),
                want,
                "{origin}"
            );
        }
    }
}
