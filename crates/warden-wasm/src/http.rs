//! Outgoing HTTP for tools (`wasi:http`): checked against the grants, resolved and vetted by
//! warden, dialled to the vetted address (never re-resolved), with credentials added by the
//! host and response bodies capped.

use crate::net::NetGate;
use bytes::Bytes;
use http::uri::Scheme;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use warden_net::{DialError, Vetting};
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

type IoFuture = Box<dyn Future<Output = Result<(), Error>> + Send>;
type SendFuture =
    Box<dyn Future<Output = Result<(http::Response<WasiBody>, IoFuture), Error>> + Send>;

/// The wasi-http hooks of one call.
pub(crate) struct Hooks {
    pub gate: NetGate,
}

impl WasiHttpHooks for Hooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: IoFuture,
    ) -> SendFuture {
        let gate = self.gate.clone();
        Box::new(async move { send(gate, request, options).await })
    }
}

async fn send(
    gate: NetGate,
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
) -> Result<(http::Response<WasiBody>, IoFuture), Error> {
    let uri = request.uri().clone();
    let tls = match uri.scheme() {
        Some(s) if *s == Scheme::HTTPS => true,
        Some(s) if *s == Scheme::HTTP => false,
        _ => return Err(Error::HttpProtocolError),
    };
    let host = uri.host().ok_or(Error::HttpRequestUriInvalid)?.to_owned();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let destination = format!("{}://{host}:{port}", if tls { "https" } else { "http" });
    let addrs = match gate.vet(&host, port).await {
        Ok(addrs) => addrs,
        Err(Vetting::Denied(reason)) => {
            gate.deny(destination, reason);
            return Err(Error::HttpRequestDenied);
        }
        Err(Vetting::Unresolved(why)) => {
            return Err(Error::DnsError {
                rcode: Some(why),
                info_code: None,
            });
        }
    };
    if !tls && let Some(reason) = gate.credentials().plain_http_refusal(&host) {
        gate.deny(destination, reason);
        return Err(Error::HttpRequestDenied);
    }
    gate.credentials()
        .apply_to(&host, request.headers_mut())
        .map_err(|why| Error::InternalError(Some(why.to_string())))?;
    let deadline = gate.deadline();
    let connect_wait = bounded(options.and_then(|o| o.connect_timeout), deadline);
    let stream = warden_net::connect(&addrs, port, connect_wait)
        .await
        .map_err(|e| match e {
            DialError::TimedOut => Error::ConnectionTimeout,
            DialError::Io(e) => Error::Connect(e),
        })?;
    gate.reached(destination, stream.peer_addr().ok());
    if gate.credentials().covers(&host) {
        gate.credential_used(&host);
    }
    let io: Box<dyn Stream> = if tls {
        Box::new(tls_connect(gate.gate().egress().tls(), &host, stream, connect_wait).await?)
    } else {
        Box::new(stream)
    };
    let (mut sender, conn) = tokio::time::timeout(
        connect_wait,
        hyper::client::conn::http1::handshake(TokioIo::new(io)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)??;
    // Sent to the origin itself, the request line carries only the path.
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    *request.uri_mut() = http::Uri::try_from(path).map_err(|_| Error::HttpRequestUriInvalid)?;

    let first_byte = bounded(options.and_then(|o| o.first_byte_timeout), deadline);
    let mut conn = Box::pin(conn);
    let response = tokio::time::timeout(first_byte, async {
        let mut sending = std::pin::pin!(sender.send_request(request));
        tokio::select! {
            r = &mut sending => r.map_err(Error::from),
            done = &mut conn => match done {
                // The connection ended cleanly; the response may still be buffered.
                Ok(()) => sending.await.map_err(Error::from),
                Err(e) => Err(Error::from(e)),
            },
        }
    })
    .await
    .map_err(|_| Error::ConnectionReadTimeout)??;
    let cap = gate.response_cap();
    let response = response.map(|incoming| {
        CappedBody {
            inner: incoming,
            read: 0,
            cap,
        }
        .boxed_unsync()
    });
    let io: IoFuture = Box::new(async move { conn.await.map_err(Error::from) });
    Ok((response, io))
}

/// The guest's own timeout, but never past the call's deadline.
fn bounded(asked: Option<Duration>, deadline: Instant) -> Duration {
    let left = deadline.saturating_duration_since(Instant::now());
    asked.map_or(left, |a| a.min(left))
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Stream for T {}

async fn tls_connect(
    tls: Arc<rustls::ClientConfig>,
    host: &str,
    stream: TcpStream,
    wait: Duration,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
    use rustls::pki_types::ServerName;
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let name = match literal.parse::<IpAddr>() {
        Ok(ip) => ServerName::from(ip),
        Err(_) => ServerName::try_from(host.to_owned()).map_err(|_| Error::DnsError {
            rcode: Some(format!("{host} is not a valid TLS server name")),
            info_code: None,
        })?,
    };
    let handshake = tokio_rustls::TlsConnector::from(tls).connect(name, stream);
    tokio::time::timeout(wait, handshake)
        .await
        .map_err(|_| Error::ConnectionTimeout)?
        .map_err(Error::Tls)
}

/// A response body that ends in an error once it passes `cap` bytes (after handing over the
/// first `cap`), so a huge download cannot fill the guest's memory or the host's.
struct CappedBody {
    inner: hyper::body::Incoming,
    read: u64,
    cap: u64,
}

impl Body for CappedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if self.read > self.cap {
            return Poll::Ready(Some(Err(Error::HttpResponseBodySize(Some(self.cap)))));
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(Error::from(e)))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        let Ok(mut data) = frame.into_data() else {
            return Poll::Ready(None); // trailers: nothing a tool needs
        };
        let room = self.cap - self.read;
        self.read += data.len() as u64;
        if self.read > self.cap {
            // Hand over what fits; the next read reports the cap.
            data.truncate(usize::try_from(room).unwrap_or(usize::MAX));
            if data.is_empty() {
                return Poll::Ready(Some(Err(Error::HttpResponseBodySize(Some(self.cap)))));
            }
        }
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.read <= self.cap && self.inner.is_end_stream()
    }
}
