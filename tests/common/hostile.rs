//! A registry that misbehaves, for the tests that attack warden's registry client: a plain
//! TCP listener on 127.0.0.1 whose answers the test scripts per request, and which records
//! every request (and every TLS handshake begun) it gets.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What came in.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// A TLS handshake began (the first byte was a TLS record's): no path or headers.
    pub(crate) tls: bool,
    /// The request's path and query.
    pub(crate) path: String,
    /// Names lowercase.
    pub(crate) headers: Vec<(String, String)>,
}

impl Seen {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How to answer.
pub(crate) enum Reply {
    /// Nothing, ever; the connection stays open.
    Stall,
    /// At once, then the connection is closed (a TLS handshake) or kept for the next request.
    Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// A 200 whose headers say `length` bytes, then one byte of them every `every`.
    Trickle { length: usize, every: Duration },
}

impl Reply {
    /// An answer with no headers but its length.
    pub(crate) fn status(status: u16, body: &[u8]) -> Reply {
        Reply::Answer {
            status,
            headers: Vec::new(),
            body: body.to_vec(),
        }
    }
}

type Script = dyn Fn(&Seen) -> Reply + Send + Sync;

pub(crate) struct Hostile {
    pub(crate) port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl Hostile {
    /// Listens on 127.0.0.1, answering each request as `script` says.
    pub(crate) fn start(script: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let script: Arc<Script> = Arc::new(script);
        let (log, stopped) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let (script, log, stopped) = (script.clone(), log.clone(), stopped.clone());
                std::thread::spawn(move || serve(stream, &*script, &log, &stopped));
            }
        });
        Hostile { port, seen, stop }
    }

    /// `oci://127.0.0.1:PORT/REPOSITORY:TAG`.
    pub(crate) fn reference(&self, repository_and_tag: &str) -> String {
        format!("oci://127.0.0.1:{}/{repository_and_tag}", self.port)
    }

    /// What came in so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Answers the requests of one connection until it closes or the server stops.
fn serve(stream: TcpStream, script: &Script, log: &Mutex<Vec<Seen>>, stop: &AtomicBool) {
    let mut first = [0u8; 1];
    if !matches!(stream.peek(&mut first), Ok(1)) {
        return;
    }
    if first[0] == 0x16 {
        let seen = Seen {
            tls: true,
            path: String::new(),
            headers: Vec::new(),
        };
        log.lock().unwrap().push(seen.clone());
        // The client's hello is read before answering: closing on unread bytes would reset the
        // connection before the client read the answer.
        let mut hello = [0u8; 4096];
        let _ = (&stream).read(&mut hello);
        reply(&stream, script(&seen), stop);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        let _ = std::io::copy(&mut &stream, &mut std::io::sink());
        return;
    }
    let mut reader = BufReader::new(&stream);
    loop {
        let mut line = String::new();
        if !matches!(reader.read_line(&mut line), Ok(1..)) {
            return;
        }
        // `METHOD PATH VERSION`
        let path = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let mut headers = Vec::new();
        loop {
            let mut header = String::new();
            if !matches!(reader.read_line(&mut header), Ok(1..)) {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
        }
        let length: u64 = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let _ = std::io::copy(&mut (&mut reader).take(length), &mut std::io::sink());
        let seen = Seen {
            tls: false,
            path,
            headers,
        };
        log.lock().unwrap().push(seen.clone());
        if !reply(&stream, script(&seen), stop) {
            return;
        }
    }
}

/// Writes `reply`; whether the connection can take another request.
fn reply(mut stream: &TcpStream, reply: Reply, stop: &AtomicBool) -> bool {
    let wait = |d: Duration| {
        let until = std::time::Instant::now() + d;
        while std::time::Instant::now() < until {
            if stop.load(Ordering::SeqCst) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    };
    match reply {
        Reply::Stall => {
            while wait(Duration::from_secs(1)) {}
            false
        }
        Reply::Answer {
            status,
            headers,
            body,
        } => {
            let mut head = format!("HTTP/1.1 {status} Scripted\r\n");
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            stream.write_all(head.as_bytes()).is_ok() && stream.write_all(&body).is_ok()
        }
        Reply::Trickle { length, every } => {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n");
            if stream.write_all(head.as_bytes()).is_err() {
                return false;
            }
            for _ in 0..length {
                if stream.write_all(b"x").is_err() || !wait(every) {
                    return false;
                }
            }
            true
        }
    }
}
