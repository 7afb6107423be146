//! The network side of one call: every HTTP request and socket address the guest uses is
//! checked against the policy's net grants here, and every refusal is reported.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use warden_core::{Denial, Denials, Meter, NetGrants, Reached};
use warden_net::{Credentials, Egress, Gate};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::sockets::SocketAddrUse;

/// One call's network gate; cheap to clone into the hooks and checks that need it.
#[derive(Clone)]
pub(crate) struct NetGate(Arc<GateInner>);

struct GateInner {
    gate: Gate,
    denials: Denials,
    meter: Meter,
    credentials: Credentials,
    response_cap: u64,
    deadline: Instant,
}

impl NetGate {
    pub(crate) fn new(
        grants: Arc<NetGrants>,
        egress: Egress,
        (denials, meter): (Denials, Meter),
        credentials: Credentials,
        response_cap: u64,
        deadline: Instant,
    ) -> NetGate {
        NetGate(Arc::new(GateInner {
            gate: Gate::new(grants, egress),
            denials,
            meter,
            credentials,
            response_cap,
            deadline,
        }))
    }

    /// The shared rule: grants, resolution and vetting.
    pub(crate) fn gate(&self) -> &Gate {
        &self.0.gate
    }

    /// Bytes of a response body the guest may read.
    pub(crate) fn response_cap(&self) -> u64 {
        self.0.response_cap
    }

    /// When the call ends; network waits never outlast it.
    pub(crate) fn deadline(&self) -> Instant {
        self.0.deadline
    }

    /// The credentials the host side adds, and the placeholders the tool sees.
    pub(crate) fn credentials(&self) -> &Credentials {
        &self.0.credentials
    }

    pub(crate) fn deny(&self, destination: String, reason: String) {
        self.0.denials.push(Denial {
            destination,
            reason,
        });
    }

    /// A destination the call was let through to: `address` is what was dialled for a name.
    pub(crate) fn reached(&self, destination: String, address: Option<SocketAddr>) {
        self.0.meter.reach(Reached {
            destination,
            address,
        });
    }

    /// Applies the socket grants to a WASI context: TCP and UDP only to granted addresses,
    /// name lookups only when the policy turns them on.
    pub(crate) fn configure_sockets(&self, b: &mut WasiCtxBuilder) {
        b.allow_ip_name_lookup(self.0.gate.grants().dns)
            .allow_tcp(true)
            .allow_udp(true);
        let gate = self.clone();
        b.socket_addr_check(move |addr, used| {
            let ok = gate.check_socket(addr, used);
            Box::pin(async move { ok })
        });
    }

    fn check_socket(&self, addr: SocketAddr, used: SocketAddrUse) -> bool {
        let refused = match used {
            // The implicit bind before a connect or a send: a wildcard, ephemeral port.
            SocketAddrUse::TcpBind | SocketAddrUse::UdpBind => {
                if addr.ip().is_unspecified() && addr.port() == 0 {
                    return true;
                }
                Some(format!(
                    "binding {addr} is not allowed: a tool may not choose local addresses"
                ))
            }
            SocketAddrUse::TcpListen | SocketAddrUse::TcpAccept => {
                Some("a tool may not accept connections".to_owned())
            }
            SocketAddrUse::TcpConnect | SocketAddrUse::UdpSend | SocketAddrUse::UdpReceive => self
                .0
                .gate
                .grants()
                .allows_socket(addr.ip(), addr.port())
                .err(),
        };
        match refused {
            // The implicit binds return above; what gets here is a connection or a datagram.
            None => {
                if !matches!(used, SocketAddrUse::UdpReceive) {
                    self.reached(format!("{} {addr}", use_name(used)), None);
                }
                true
            }
            Some(reason) => {
                // Datagrams from elsewhere are dropped quietly, like a firewall would.
                if !matches!(used, SocketAddrUse::UdpReceive) {
                    self.deny(format!("{} {addr}", use_name(used)), reason);
                }
                false
            }
        }
    }
}

fn use_name(used: SocketAddrUse) -> &'static str {
    match used {
        SocketAddrUse::TcpBind => "tcp bind",
        SocketAddrUse::TcpListen => "tcp listen",
        SocketAddrUse::TcpAccept => "tcp accept",
        SocketAddrUse::TcpConnect => "tcp",
        SocketAddrUse::UdpBind => "udp bind",
        SocketAddrUse::UdpSend | SocketAddrUse::UdpReceive => "udp",
    }
}

/// Answers guest name lookups with a failure, and records each as a denial. Linked over
/// wasmtime's own lookup when a policy leaves `dns` off, which otherwise refuses silently.
pub(crate) fn refuse_lookups(
    linker: &mut wasmtime::component::Linker<crate::sandbox::CallState>,
) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::ResolveAddressStream;
    use wasmtime_wasi::p2::bindings::sockets::network::{ErrorCode, Network};
    type Answer = (Result<Resource<ResolveAddressStream>, ErrorCode>,);
    linker.allow_shadowing(true);
    let mut lookup = linker.instance("wasi:sockets/ip-name-lookup@0.2.12")?;
    lookup.func_wrap_async(
        "resolve-addresses",
        |store, (_network, name): (Resource<Network>, String)| {
            store.data().net().deny(
                format!("dns {name}"),
                "guest name lookups are off for this tool (`dns = true` turns them on)".into(),
            );
            Box::new(async { Ok::<Answer, _>((Err(ErrorCode::PermanentResolverFailure),)) })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}
