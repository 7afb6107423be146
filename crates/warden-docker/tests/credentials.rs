//! Credentials a docker tool can use but never read: the gate sets them at their host over
//! HTTP and HTTPS (the container trusts its own CA through a mounted bundle), the container's
//! variable holds a placeholder, and what the host echoes comes back masked by the gate. Real
//! containers of the Debian image, HTTP and TLS servers on this machine's 127.0.0.1.

use crate::common::*;
use warden_test_support::servers::{HttpServer, TlsServer};

under_runc_and_gvisor!(the_value_reaches_its_host_in_a_container_and_never_comes_back);

const VAR: &str = "WARDEN_TEST_DOCKER_TOKEN";
const TOKEN: &str = "real-docker-token-53be0a1c";

async fn the_value_reaches_its_host_in_a_container_and_never_comes_back(sandbox: Sandbox) {
    // SAFETY: these tests alone set it, to a value that never changes, and no other test
    // writes the environment.
    unsafe { std::env::set_var(VAR, TOKEN) };
    let mut h = docker_or_skip!(sandbox);
    let web = HttpServer::start();
    let tls = TlsServer::start(&["api.test"]);
    h.trust_upstream(&tls.ca_pem);
    let (w, t) = (web.port, tls.port);
    let grants = format!(
        "net = [\"api.test:{w}\", \"127.0.0.1:{w}\", \"other.test:{w}\", \"api.test:{t}\", \"127.0.0.1:{t}\"]\n\
         net_credentials = [{{ host = \"api.test\", header = \"Authorization\", from_host = \"{VAR}\", \
         prefix = \"Bearer \", env = \"API_TOKEN\", allow_plain_http = true }}]\ncredential_host_shared = true"
    );
    let command = format!(
        "echo \"env=$API_TOKEN\"; \
         curl -sS -H 'Authorization: Bearer forged' http://api.test:{w}/echo-auth; echo; \
         curl -sS -H \"Authorization: Bearer $API_TOKEN\" http://other.test:{w}/echo-auth; echo; \
         curl -sS https://api.test:{t}/echo-auth; echo; \
         python3 -c \"import urllib.request as u; print(u.urlopen('https://api.test:{t}/echo-auth').read().decode())\"; \
         echo \"keys=$(grep -c 'PRIVATE KEY' \"$SSL_CERT_FILE\")\""
    );
    for mode in ["", "session = true"] {
        let d = h.dispatcher("sh", &h.shell_policy(mode, &grants, "timeout = \"30s\""));
        let m = call(&d, "sh", cmd(&command)).await;
        let content = &m.content;
        assert!(!content.contains(TOKEN), "{mode}: {content}");
        // What the server echoed came back masked by the gate, before the container saw it.
        assert_eq!(
            content.matches("Bearer [warden:redacted]").count(),
            3,
            "{mode}: {content}"
        );
        assert!(
            content.contains("env=warden-placeholder-api_token-"),
            "{mode}: {content}"
        );
        assert!(content.contains("keys=0"), "{mode}: {content}");
        d.close().await;
    }
    let real = format!("Authorization: Bearer {TOKEN}");
    let heads = web.heads();
    let to_api: Vec<&String> = heads.iter().filter(|h| h.contains("api.test")).collect();
    assert_eq!(to_api.len(), 2, "{heads:?}");
    assert!(
        to_api
            .iter()
            .all(|h| h.contains(&real) && !h.contains("forged")),
        "{heads:?}"
    );
    let to_other: Vec<&String> = heads.iter().filter(|h| h.contains("other.test")).collect();
    assert!(to_other.iter().all(|h| !h.contains(TOKEN)), "{to_other:?}");
    let over_tls = tls.requests.lock().unwrap().clone();
    assert_eq!(over_tls.len(), 4, "{over_tls:?}");
    assert!(over_tls.iter().all(|h| h.contains(&real)), "{over_tls:?}");
    h.assert_clean().await;
}
