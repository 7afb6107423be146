//! A snapshot's archive written and read past the page cache (`O_DIRECT`), where the
//! filesystem allows it. An archive is written once and read at a restore, often much later:
//! through the page cache it takes as many fresh pages as it has bytes, and on a VM that
//! hands free memory back to its host, touching those costs more than the disk's write
//! (50 MB: 150–320 ms written and synced through the cache, 40–60 ms direct; see
//! docs/benchmarks.md). Where the filesystem refuses `O_DIRECT` (tmpfs before Linux 6.6,
//! some FUSE), or a read or write is not aligned as it needs, the file is used as usual.

use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// What `O_DIRECT` aligns addresses, offsets and lengths to: a page, a multiple of every
/// block size Linux's filesystems use here.
const ALIGN: usize = 4096;
/// The bytes moved at a time.
const CHUNK: usize = 1 << 20;

/// A `CHUNK`-byte buffer at an address `ALIGN` divides.
struct Aligned {
    raw: Vec<u8>,
    start: usize,
}

impl Aligned {
    fn new() -> Self {
        let raw = vec![0u8; CHUNK + ALIGN];
        let start = (ALIGN - raw.as_ptr() as usize % ALIGN) % ALIGN;
        Self { raw, start }
    }

    fn get(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + CHUNK]
    }
}

/// Opens `options` at `path` direct, or as usual where the filesystem refuses that.
fn open(options: &mut OpenOptions, path: &Path) -> io::Result<(File, bool)> {
    match options
        .clone()
        .custom_flags(OFlags::DIRECT.bits() as i32)
        .open(path)
    {
        Ok(file) => Ok((file, true)),
        Err(e) if refused(&e) => Ok((options.open(path)?, false)),
        Err(e) => Err(e),
    }
}

/// Whether `e` is how the kernel refuses `O_DIRECT` (`EINVAL`): at the open, on a filesystem
/// without it; at a read or write, one not aligned as the file needs.
fn refused(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error())
}

/// Turns `O_DIRECT` off for `file`: what follows goes through the page cache.
fn undirect(file: &File) -> io::Result<()> {
    let flags = fcntl_getfl(file)?;
    fcntl_setfl(file, flags - OFlags::DIRECT)?;
    Ok(())
}

/// A new file (`0600`, never one that exists) written past the page cache: whole chunks as
/// they fill, the rest at [`DirectWriter::finish`].
pub struct DirectWriter {
    file: File,
    direct: bool,
    buf: Aligned,
    filled: usize,
    len: u64,
}

impl DirectWriter {
    /// Creates `path`.
    pub fn create(path: &Path) -> io::Result<Self> {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true).mode(0o600);
        let (file, direct) = open(&mut options, path)?;
        Ok(Self {
            file,
            direct,
            buf: Aligned::new(),
            filled: 0,
            len: 0,
        })
    }

    /// The bytes written so far.
    pub fn written(&self) -> u64 {
        self.len
    }

    /// Writes what is left and syncs the file.
    pub fn finish(&mut self) -> io::Result<()> {
        if self.filled > 0 {
            // Direct, the tail goes out padded to a whole block, and the file is cut back
            // to its length after.
            let padded = match self.direct {
                true => self.filled.next_multiple_of(ALIGN),
                false => self.filled,
            };
            let filled = self.filled;
            self.buf.get()[filled..padded].fill(0);
            self.put(padded)?;
            self.file.set_len(self.len)?;
        }
        self.file.sync_all()
    }

    /// Writes the buffer's first `n` bytes at the end of what the file holds.
    fn put(&mut self, n: usize) -> io::Result<()> {
        let at = self.len - self.filled as u64;
        let written = self.file.write_all_at(&self.buf.get()[..n], at);
        match written {
            Err(e) if self.direct && refused(&e) => {
                // The same bytes at the same place, through the cache.
                undirect(&self.file)?;
                self.direct = false;
                let filled = self.filled;
                self.file.write_all_at(&self.buf.get()[..filled], at)?;
            }
            other => other?,
        }
        self.filled = 0;
        Ok(())
    }
}

impl Write for DirectWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.filled);
        let filled = self.filled;
        self.buf.get()[filled..filled + n].copy_from_slice(&data[..n]);
        self.filled += n;
        self.len += n as u64;
        if self.filled == CHUNK {
            self.put(CHUNK)?;
        }
        Ok(n)
    }

    /// Nothing: whole chunks go when they fill, the rest at [`DirectWriter::finish`], the
    /// one place a partial block may be written.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A file read past the page cache, a chunk at a time, the next chunk read from the disk
/// by a thread of its own while the last is used.
pub struct DirectReader {
    len: u64,
    chunks: Receiver<io::Result<(Aligned, usize)>>,
    spare: SyncSender<Aligned>,
    chunk: Option<(Aligned, usize)>,
    at: usize,
}

impl DirectReader {
    /// Opens `path`.
    pub fn open(path: &Path) -> io::Result<Self> {
        let (file, direct) = open(OpenOptions::new().read(true), path)?;
        let len = file.metadata()?.len();
        // Two chunks: one read while the other is used, each handed back when used.
        let (send, chunks) = sync_channel(AHEAD);
        let (spare, spares) = sync_channel(AHEAD);
        for _ in 0..AHEAD {
            let _ = spare.send(Aligned::new());
        }
        std::thread::Builder::new()
            .name("warden-archive-read".into())
            .spawn(move || read_ahead(file, direct, spares, send))?;
        Ok(Self {
            len,
            chunks,
            spare,
            chunk: None,
            at: 0,
        })
    }

    /// The file's length when it was opened.
    pub fn size(&self) -> u64 {
        self.len
    }
}

/// The chunks read ahead of their use.
const AHEAD: usize = 2;

/// Reads `file` a chunk at a time into the buffers `spares` hands over, each sent to
/// `chunks` as read, until its end (an empty chunk), an error, or the reader is dropped.
fn read_ahead(
    file: File,
    mut direct: bool,
    spares: Receiver<Aligned>,
    chunks: SyncSender<io::Result<(Aligned, usize)>>,
) {
    let mut offset = 0u64;
    while let Ok(mut buf) = spares.recv() {
        let read = match file.read_at(buf.get(), offset) {
            Err(e) if direct && refused(&e) => {
                direct = false;
                undirect(&file).and_then(|()| file.read_at(buf.get(), offset))
            }
            other => other,
        };
        let end = !matches!(read, Ok(n) if n > 0);
        if let Ok(n) = read {
            offset += n as u64;
        }
        if chunks.send(read.map(|n| (buf, n))).is_err() || end {
            return;
        }
    }
}

impl Read for DirectReader {
    fn read(&mut self, into: &mut [u8]) -> io::Result<usize> {
        let (buf, n) = match &mut self.chunk {
            Some((buf, n)) if self.at < *n => (buf, *n),
            _ => {
                if let Some((used, _)) = self.chunk.take() {
                    let _ = self.spare.send(used);
                }
                // The thread is gone only after the file's end or an error, both answered.
                let Ok(next) = self.chunks.recv() else {
                    return Ok(0);
                };
                self.at = 0;
                let (buf, n) = self.chunk.insert(next?);
                (buf, *n)
            }
        };
        let take = into.len().min(n - self.at);
        into[..take].copy_from_slice(&buf.get()[self.at..self.at + take]);
        self.at += take;
        Ok(take)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_every_length_come_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let lengths = [
            0,
            1,
            511,
            ALIGN - 1,
            ALIGN,
            ALIGN + 1,
            CHUNK,
            CHUNK + 1,
            3 * CHUNK - 7,
        ];
        for (i, len) in lengths.into_iter().enumerate() {
            let path = dir.path().join(i.to_string());
            let data: Vec<u8> = (0..len).map(|b| (b * 31 % 251) as u8).collect();
            let mut out = DirectWriter::create(&path).unwrap();
            // In uneven pieces, as a tar builder writes.
            for piece in data.chunks(4099) {
                out.write_all(piece).unwrap();
            }
            assert_eq!(out.written(), len as u64);
            out.finish().unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), data, "length {len}");
            let mut back = Vec::new();
            let mut reader = DirectReader::open(&path).unwrap();
            assert_eq!(reader.size(), len as u64);
            reader.read_to_end(&mut back).unwrap();
            assert_eq!(back, data, "length {len}, read direct");
        }
    }

    #[test]
    fn an_existing_file_is_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kept");
        std::fs::write(&path, b"kept").unwrap();
        let refused = DirectWriter::create(&path).err().unwrap();
        assert_eq!(refused.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&path).unwrap(), b"kept");
    }
}
