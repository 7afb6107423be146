//! The HTTP connections that have not yet shown the token, bounded so that idle ones cannot
//! use up the server's descriptors and keep clients that hold the token out.
//!
//! A connection counts from its acceptance until a request of it passes the guard, or it
//! ends. At the cap ([`ConnectionLimits::unauthenticated`]), or when the server is out of
//! descriptors, the connection that has been silent longest is closed to make room, once it
//! has been silent for [`ConnectionLimits::silence`]: the server was waiting for its request
//! and it sent nothing in that time. A connection that is sending is never closed to make
//! room (the header timeout bounds how long it may take), and one that has shown the token
//! no longer counts, so a client that holds the token is never the one closed: it sends its
//! request as soon as it connects. While no connection has been silent that long the server
//! accepts no more, and the kernel's queue holds them until one has, or one authenticates or
//! ends. What is closed is logged, at most a line a second.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a connection may keep the server waiting, and how many may wait before they have
/// shown the token. A client that holds the token sends its request at once; these bound what
/// anyone who can merely reach the port can hold open.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// A connection waiting for a request (just accepted, or its last response sent) must
    /// deliver that request's whole head within this, or it is closed: it ends idle
    /// keep-alive connections and heads sent a byte at a time alike. A response being sent
    /// (a long call, an event stream) is not waiting. 10 s.
    pub header_timeout: Duration,
    /// Connections open that have not yet made an authenticated request, at most. At the
    /// cap, the one silent longest is closed to make room once it has been silent for
    /// [`ConnectionLimits::silence`]; until one has, no more are accepted (the kernel's
    /// queue holds them). 1024.
    pub unauthenticated: usize,
    /// How long a connection without the token must have sent nothing, while the server
    /// waited for its request, before it may be closed to make room. A client that holds
    /// the token sends its request as it connects; a connection that is sending is never
    /// closed to make room. 1 s.
    pub silence: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            unauthenticated: 1024,
            silence: Duration::from_secs(1),
        }
    }
}

/// How often the server looks again for a connection silent long enough to close, while it
/// waits for room.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// The connections open that have not shown the token.
pub(crate) struct Unauthenticated {
    /// One per connection counted, up to the cap.
    permits: Arc<Semaphore>,
    cap: usize,
    silence: Duration,
    /// By order of acceptance.
    open: Mutex<BTreeMap<u64, Open>>,
    next: AtomicU64,
    /// Woken when a connection stops counting: it authenticated, or ended.
    left: Notify,
    cuts: Arc<Cuts>,
}

struct Open {
    closed: CancellationToken,
    watch: Arc<Watch>,
    peer: SocketAddr,
}

/// What a connection's reads show: when it last sent a byte, and whether the server is
/// waiting for more.
pub(crate) struct Watch {
    accepted: Instant,
    /// Microseconds from acceptance to the last byte received (0: none yet).
    last_byte: AtomicU64,
    /// The last read found nothing: the server waits for the connection.
    starved: AtomicBool,
}

impl Watch {
    fn new() -> Self {
        Self {
            accepted: Instant::now(),
            last_byte: AtomicU64::new(0),
            starved: AtomicBool::new(false),
        }
    }

    fn heard(&self) {
        let since = self.accepted.elapsed().as_micros();
        self.last_byte
            .store(u64::try_from(since).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.starved.store(false, Ordering::Relaxed);
    }

    /// How long the server has waited for the connection without a byte; `None` while it is
    /// not waiting for it.
    fn silent_for(&self, now: Instant) -> Option<Duration> {
        if !self.starved.load(Ordering::Relaxed) {
            return None;
        }
        let last = Duration::from_micros(self.last_byte.load(Ordering::Relaxed));
        Some(now.saturating_duration_since(self.accepted + last))
    }
}

/// Why room had to be made.
#[derive(Clone, Copy)]
enum Short {
    /// The cap of connections without the token was reached.
    Cap(usize),
    /// Accepting failed for want of descriptors.
    Descriptors,
}

/// What looking for a connection to close found.
enum Looked {
    /// One was told to close.
    Closed,
    /// None has been silent long enough; one may be after this.
    NotYet(Duration),
}

impl Unauthenticated {
    pub(crate) fn new(limits: &ConnectionLimits) -> Self {
        // Room for the one being accepted, however small the cap.
        let cap = limits.unauthenticated.max(1);
        Self {
            permits: Arc::new(Semaphore::new(cap)),
            cap,
            silence: limits.silence,
            open: Mutex::default(),
            next: AtomicU64::new(0),
            left: Notify::new(),
            cuts: Arc::default(),
        }
    }

    fn open(&self) -> MutexGuard<'_, BTreeMap<u64, Open>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for the connection just accepted from `peer`. At the cap this waits until a
    /// connection stops counting, closing one that has been silent long enough when there is
    /// one: a flood is taken off the kernel's queue no faster than room is made.
    pub(crate) async fn admit(self: &Arc<Self>, peer: SocketAddr) -> Ticket {
        let permit = loop {
            if let Ok(permit) = self.permits.clone().try_acquire_owned() {
                break permit;
            }
            let again = match self.close_silent(Short::Cap(self.cap)) {
                Looked::Closed => self.silence,
                Looked::NotYet(after) => after,
            };
            tokio::select! {
                permit = self.permits.clone().acquire_owned() => {
                    // The semaphore is never closed: a permit is all it gives.
                    if let Ok(permit) = permit {
                        break permit;
                    }
                }
                () = tokio::time::sleep(again) => {}
            }
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let closed = CancellationToken::new();
        let watch = Arc::new(Watch::new());
        self.open().insert(
            id,
            Open {
                closed: closed.clone(),
                watch: watch.clone(),
                peer,
            },
        );
        Ticket {
            id,
            closed,
            watch,
            permit: Mutex::new(Some(permit)),
            waiting: self.clone(),
        }
    }

    /// The server is out of descriptors: closes a connection that has been silent long
    /// enough and waits until it has closed, or, without one, waits a moment.
    pub(crate) async fn make_room(&self) {
        let left = self.left.notified();
        tokio::pin!(left);
        left.as_mut().enable();
        match self.close_silent(Short::Descriptors) {
            Looked::Closed => {
                if tokio::time::timeout(self.silence, left).await.is_err() {
                    tracing::debug!("a connection told to close had not closed yet");
                }
            }
            Looked::NotYet(after) => tokio::time::sleep(after).await,
        }
    }

    /// Tells the connection silent longest to close, if it has been silent for the limits'
    /// silence.
    fn close_silent(&self, short: Short) -> Looked {
        let now = Instant::now();
        let mut open = self.open();
        let mut longest: Option<(u64, Duration)> = None;
        let mut soonest = LOOK_AGAIN;
        for (&id, connection) in open.iter() {
            let Some(silent) = connection.watch.silent_for(now) else {
                continue;
            };
            if silent < self.silence {
                soonest = soonest.min(self.silence - silent);
            } else if longest.is_none_or(|(_, l)| silent > l) {
                longest = Some((id, silent));
            }
        }
        let Some((id, silent)) = longest else {
            return Looked::NotYet(soonest);
        };
        let Some(victim) = open.remove(&id) else {
            return Looked::NotYet(soonest);
        };
        drop(open);
        victim.closed.cancel();
        self.cuts.closed(victim.peer, silent, short);
        Looked::Closed
    }

    /// Logs the count of connections closed and not yet logged: the server is stopping.
    pub(crate) fn report_closed(&self) {
        self.cuts.report();
    }

    fn left(&self, id: u64) {
        self.open().remove(&id);
        self.left.notify_waiters();
    }
}

/// One connection's place among those without the token, given up when it authenticates or
/// ends.
pub(crate) struct Ticket {
    id: u64,
    /// Cancelled when the connection is to close to make room.
    pub(crate) closed: CancellationToken,
    watch: Arc<Watch>,
    /// Held while the connection has not authenticated.
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    waiting: Arc<Unauthenticated>,
}

impl Ticket {
    /// The connection made a request that passed the guard: it no longer counts.
    pub(crate) fn authenticated(&self) {
        let held = self
            .permit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(permit) = held {
            drop(permit);
            self.waiting.left(self.id);
        }
    }

    /// The connection's stream, its reads watched.
    pub(crate) fn watched(&self, stream: TcpStream) -> Watched {
        Watched {
            stream,
            watch: self.watch.clone(),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // The permit goes first, so that whoever `left` wakes finds it free.
        drop(
            self.permit
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        self.waiting.left(self.id);
    }
}

/// A connection's stream, telling its [`Watch`] what its reads find.
pub(crate) struct Watched {
    stream: TcpStream,
    watch: Arc<Watch>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        match &polled {
            Poll::Pending => self.watch.starved.store(true, Ordering::Relaxed),
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.watch.heard(),
            Poll::Ready(_) => {}
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The log of connections closed to make room: the first at once, with its address; those
/// closed in the second after it, counted on a line of their own.
#[derive(Default)]
struct Cuts(Mutex<CutsState>);

#[derive(Default)]
struct CutsState {
    /// A line was written less than a second ago; the count is written when the second ends.
    quiet: bool,
    unreported: u64,
}

impl Cuts {
    fn closed(self: &Arc<Self>, peer: SocketAddr, silent: Duration, short: Short) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if state.quiet {
            state.unreported += 1;
            return;
        }
        state.quiet = true;
        drop(state);
        let why = match short {
            Short::Cap(cap) => {
                format!("{cap} connections without it were open (--max-unauthenticated)")
            }
            Short::Descriptors => "the server had no file descriptor left".to_owned(),
        };
        tracing::warn!(
            "closed a connection from {peer} that had not shown the token and had sent \
             nothing for {silent:.1?}, to make room: {why}"
        );
        let cuts = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            cuts.report();
        });
    }

    /// Logs how many were closed since the last line, and ends the quiet.
    fn report(&self) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let more = std::mem::take(&mut state.unreported);
        state.quiet = false;
        drop(state);
        if more > 0 {
            tracing::warn!(
                "closed {more} more connections that had not shown the token and had sent \
                 nothing for a while, to make room, since the last such line"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(cap: usize) -> ConnectionLimits {
        ConnectionLimits {
            unauthenticated: cap,
            silence: Duration::from_secs(1),
            ..ConnectionLimits::default()
        }
    }

    fn peer() -> SocketAddr {
        "127.0.0.1:9".parse().unwrap()
    }

    /// Whether `admit` is still waiting after the tasks that can run have run.
    async fn waiting(admit: &tokio::task::JoinHandle<Ticket>) -> bool {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        !admit.is_finished()
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_connection_silent_long_enough_makes_room() {
        let waiting_room = Arc::new(Unauthenticated::new(&limits(2)));
        let silent = waiting_room.admit(peer()).await;
        let sending = waiting_room.admit(peer()).await;
        silent.watch.starved.store(true, Ordering::Relaxed);
        let third = tokio::spawn({
            let waiting_room = waiting_room.clone();
            async move { waiting_room.admit(peer()).await }
        });
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(waiting(&third).await, "nobody silent for a second yet");
        // The second sends a byte now and then, and waits for more between them.
        sending.watch.heard();
        sending.watch.starved.store(true, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(silent.closed.is_cancelled(), "silent for 1.1 s: closed");
        assert!(!sending.closed.is_cancelled(), "it sent 0.5 s ago");
        assert!(
            waiting(&third).await,
            "no room until the closed one has gone"
        );
        drop(silent);
        let third = third.await.unwrap();

        // One that authenticates no longer counts, and is never closed.
        sending.authenticated();
        let fourth = waiting_room.admit(peer()).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!sending.closed.is_cancelled());
        drop((third, fourth));
    }

    #[tokio::test(start_paused = true)]
    async fn out_of_descriptors_a_silent_connection_is_closed() {
        let waiting_room = Arc::new(Unauthenticated::new(&limits(100)));
        let silent = waiting_room.admit(peer()).await;
        let talking = waiting_room.admit(peer()).await;
        silent.watch.starved.store(true, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let room = tokio::spawn({
            let waiting_room = waiting_room.clone();
            async move { waiting_room.make_room().await }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(silent.closed.is_cancelled());
        assert!(
            !talking.closed.is_cancelled(),
            "not waited for: never closed"
        );
        drop(silent);
        room.await.unwrap();
    }
}
