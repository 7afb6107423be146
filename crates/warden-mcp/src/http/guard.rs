//! The checks in front of the MCP endpoint: `Host`, `Origin`, the bearer token and the path,
//! in that order, for every request whatever its method.

use super::{Body, HttpOptions, PATH, text};
use http::{Request, Response, StatusCode, header};
use std::net::SocketAddr;
use subtle::ConstantTimeEq;

/// The checks in front of the MCP endpoint, for every request whatever its method.
pub(super) struct Guard {
    token: String,
    origins: Vec<String>,
    /// The host names `Host` may give; `None` when remote clients are allowed.
    hosts: Option<Vec<String>>,
}

impl Guard {
    pub(super) fn new(options: &HttpOptions, local: SocketAddr) -> Self {
        let port = local.port();
        let mut origins = vec![
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
            format!("http://[::1]:{port}"),
        ];
        origins.extend(options.allow_origins.iter().map(|o| normalise_origin(o)));
        let hosts = (!options.allow_remote).then(|| {
            let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).into();
            let bound = local.ip().to_string();
            if !hosts.contains(&bound) {
                hosts.push(bound);
            }
            hosts
        });
        Self {
            token: options.token.clone(),
            origins,
            hosts,
        }
    }

    pub(super) fn check<B>(&self, request: &Request<B>) -> Result<(), Refusal> {
        if let Some(hosts) = &self.hosts {
            let host = host_name(request)?;
            if !hosts.contains(&host) {
                return Err(Refusal(
                    StatusCode::FORBIDDEN,
                    "this Host is not the server's: a loopback name is expected (start the \
                     server with --allow-remote to take requests for other names)",
                ));
            }
        }
        if let Some(origin) = request.headers().get(header::ORIGIN) {
            let allowed = origin
                .to_str()
                .is_ok_and(|o| self.origins.contains(&normalise_origin(o)));
            if !allowed {
                return Err(Refusal(
                    StatusCode::FORBIDDEN,
                    "this Origin may not use the server; start it with --allow-origin to allow it",
                ));
            }
        }
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

/// The host name a request is for, from `Host` (or the target's authority), lowercase and
/// without brackets or port.
fn host_name<B>(request: &Request<B>) -> Result<String, Refusal> {
    let bad = |why| Refusal(StatusCode::BAD_REQUEST, why);
    let authority = match request.headers().get(header::HOST) {
        Some(value) => {
            let value = value
                .to_str()
                .map_err(|_| bad("the Host header is not text"))?;
            http::uri::Authority::try_from(value)
                .map_err(|_| bad("the Host header is malformed"))?
        }
        None => request
            .uri()
            .authority()
            .cloned()
            .ok_or_else(|| bad("the request has no Host header"))?,
    };
    let host = authority.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Ok(host.to_ascii_lowercase())
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

fn normalise_origin(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
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
