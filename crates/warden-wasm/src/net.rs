//! The network side of one call: every HTTP request and socket address the guest uses is
//! checked against the policy's net grants here, and every refusal is reported.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use warden_core::{Denial, Denials, Meter, NetGrants, Reached};
use warden_net::{Credentials, Egress, Gate, Vetting};

/// Why the network is refused to a guest whose call has not started.
const BEFORE_THE_CALL: &str =
    "the network opens when the call starts, not while its sandbox is prepared";
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::sockets::SocketAddrUse;

/// One call's network gate; cheap to clone into the hooks and checks that need it.
#[derive(Clone)]
pub(crate) struct NetGate(Arc<GateInner>);

struct GateInner {
    gate: Gate,
    credentials: Credentials,
    response_cap: u64,
    /// The call the gate serves: unset while its sandbox is prepared ahead of one, when
    /// every use of the network is refused.
    call: OnceLock<CallSide>,
    /// The guest tried the network before its call was bound.
    early: AtomicBool,
}

/// Where a call's refusals and destinations go, and when it ends.
struct CallSide {
    denials: Denials,
    meter: Meter,
    deadline: Instant,
}

impl NetGate {
    /// A gate that serves no call yet: see [`NetGate::bind`].
    pub(crate) fn new(
        grants: Arc<NetGrants>,
        egress: Egress,
        credentials: Credentials,
        response_cap: u64,
    ) -> NetGate {
        NetGate(Arc::new(GateInner {
            gate: Gate::new(grants, egress),
            credentials,
            response_cap,
            call: OnceLock::new(),
            early: AtomicBool::new(false),
        }))
    }

    /// Opens the gate for the call whose refusals go to `denials`, whose destinations go to
    /// `meter` and which ends at `deadline`. A gate serves one call: a second bind is ignored.
    pub(crate) fn bind(&self, denials: Denials, meter: Meter, deadline: Instant) {
        let _ = self.0.call.set(CallSide {
            denials,
            meter,
            deadline,
        });
    }

    /// Whether the guest tried the network before the gate was bound to its call.
    pub(crate) fn used_early(&self) -> bool {
        self.0.early.load(Ordering::Relaxed)
    }

    /// The bound call, or `None` after noting that the guest reached for the network early.
    fn serving(&self) -> Option<&CallSide> {
        let call = self.0.call.get();
        if call.is_none() {
            self.0.early.store(true, Ordering::Relaxed);
        }
        call
    }

    /// The shared rule: grants, resolution and vetting.
    pub(crate) fn gate(&self) -> &Gate {
        &self.0.gate
    }

    /// Bytes of a response body the guest may read.
    pub(crate) fn response_cap(&self) -> u64 {
        self.0.response_cap
    }

    /// When the call ends; network waits never outlast it (nor start before it is bound).
    pub(crate) fn deadline(&self) -> Instant {
        self.serving().map_or_else(Instant::now, |c| c.deadline)
    }

    /// Vets a request to `host`:`port` for the bound call: refused before one is.
    pub(crate) async fn vet(&self, host: &str, port: u16) -> Result<Vec<IpAddr>, Vetting> {
        match self.serving() {
            Some(call) => self.0.gate.vet(host, port, call.deadline).await,
            None => Err(Vetting::Denied(BEFORE_THE_CALL.to_owned())),
        }
    }

    /// The credentials the host side adds, and the placeholders the tool sees.
    pub(crate) fn credentials(&self) -> &Credentials {
        &self.0.credentials
    }

    pub(crate) fn deny(&self, destination: String, reason: String) {
        if let Some(call) = self.serving() {
            call.denials.push(Denial {
                destination,
                reason,
            });
        }
    }

    /// A destination the call was let through to: `address` is what was dialled for a name.
    pub(crate) fn reached(&self, destination: String, address: Option<SocketAddr>) {
        if let Some(call) = self.serving() {
            call.meter.reach(Reached {
                destination,
                address,
            });
        }
    }

    /// A request to `host` that carries the host's credential.
    pub(crate) fn credential_used(&self, host: &str) {
        if let Some(call) = self.serving() {
            call.meter.use_credential(host);
        }
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
        if self.serving().is_none() {
            return false;
        }
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

/// A store's data that holds the call's network gate.
pub(crate) trait NetView {
    /// The call's network gate.
    fn net(&self) -> &NetGate;
}

/// Answers guest name lookups with a failure, and records each as a denial. Linked over
/// wasmtime's own lookup when a policy leaves `dns` off, which otherwise refuses silently.
pub(crate) fn refuse_lookups<T: NetView + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use warden_core::HostGrant;
    use warden_net::Resolver;

    #[tokio::test]
    async fn a_gate_is_shut_until_it_is_bound_to_its_call() {
        let grants = NetGrants {
            hosts: vec![HostGrant::parse("127.0.0.1:8080").unwrap()],
            ..Default::default()
        };
        let gate = NetGate::new(
            Arc::new(grants),
            Egress::new(Resolver::default()),
            Credentials::new(Vec::new()),
            1024,
        );
        let granted: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert!(!gate.check_socket(granted, SocketAddrUse::TcpConnect));
        assert!(matches!(
            gate.vet("127.0.0.1", 8080).await,
            Err(Vetting::Denied(_))
        ));
        assert!(gate.used_early());

        let (denials, meter) = (Denials::default(), Meter::default());
        gate.bind(
            denials.clone(),
            meter.clone(),
            Instant::now() + Duration::from_secs(5),
        );
        assert!(gate.check_socket(granted, SocketAddrUse::TcpConnect));
        let vetted = gate.vet("127.0.0.1", 8080).await.ok();
        assert_eq!(vetted, Some(vec![granted.ip()]));
        let other: SocketAddr = "127.0.0.2:8080".parse().unwrap();
        assert!(!gate.check_socket(other, SocketAddrUse::TcpConnect));
        // The call sees only what happened once it was bound.
        let denied = denials.snapshot().kept;
        let reached = meter.reached().kept;
        assert_eq!(denied.len(), 1, "{denied:?}");
        assert_eq!(denied[0].destination, "tcp 127.0.0.2:8080");
        assert_eq!(reached.len(), 1, "{reached:?}");
        assert_eq!(reached[0].destination, "tcp 127.0.0.1:8080");
    }
}
