//! The archive of a snapshot: what `tar` in the sandbox wrote, checked and written again by
//! warden, so that what is kept (and restored) holds only plain relative paths.

use std::collections::HashSet;
use std::io::{Read, Write};
use tar::{Archive, Builder, EntryType, Header};

/// Why an archive is refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ArchiveError {
    #[error("the archive is not a tar archive warden can read: {0}")]
    Unreadable(String),
    #[error(
        "the archive names {0:?}, which is not a plain path below its root (absolute, or with `..`)"
    )]
    OutOfRoot(String),
    #[error(
        "the archive puts {path:?} below {link:?}, a symbolic link it holds: a restore would write through it"
    )]
    BelowLink { path: String, link: String },
    #[error("the archive holds {path:?}, a {kind} (only files, folders and links are kept)")]
    Kind { path: String, kind: &'static str },
    #[error("the archive links {path:?} to {target:?}, outside its root")]
    HardLinkOut { path: String, target: String },
    #[error("the archive could not be written: {0}")]
    Write(String),
}

/// `archive` (tar archives one after another, as the sandbox's `tar` wrote one a folder)
/// checked and written again as one, as a snapshot keeps it: its entries in order, every path
/// relative and without `..`, none below a symbolic link of the archive, hard links only to
/// paths of the archive. Left out: the root folder's own entry (`./`: the sandbox's `/tmp` is
/// not the user's to change), what lies at or below `skip` (`./a/b`: the policy's roots,
/// mounts of their own), and FIFOs and devices (a snapshot keeps files, folders and links).
/// Written into `out`, which is answered when it holds the whole archive.
pub fn rewrite_into<W: Write>(archive: &[u8], skip: &[&str], out: W) -> Result<W, ArchiveError> {
    whole(archive, skip, false, out)
}

/// A kept archive checked again and cut for a restore: as [`rewrite_into`], but a FIFO or a
/// device is refused (warden never keeps one: the archive was edited), and the entries come
/// as archives one after another, each at most `max` bytes but for one entry larger than
/// that alone: what a restore unpacks a command at a time.
pub fn split(archive: &[u8], skip: &[&str], max: usize) -> Result<Vec<Vec<u8>>, ArchiveError> {
    let mut groups = Vec::new();
    let room = archive.len().min(max).saturating_add(1024);
    rewrite(
        archive,
        skip,
        max,
        true,
        || Ok(Vec::with_capacity(room)),
        |group| groups.push(group),
    )?;
    Ok(groups)
}

/// A kept archive of `len` bytes, read from `archive`, checked again whole for a restore
/// that moves it in one piece: as [`split`] with no bound. One that warden wrote is its own
/// rewrite: it is compared with that as it is made, not copied, and answered as it was read;
/// one that differs (edited, or kept by another warden) is answered written again.
pub fn checked(mut archive: impl Read, len: usize, skip: &[&str]) -> Result<Vec<u8>, ArchiveError> {
    let mut kept = Vec::with_capacity(len);
    archive
        .read_to_end(&mut kept)
        .map_err(|e| ArchiveError::Unreadable(e.to_string()))?;
    let mut same = false;
    rewrite(
        kept.as_slice(),
        skip,
        usize::MAX,
        true,
        || Ok(Compare::new(&kept)),
        |compared| same = compared.whole(),
    )?;
    match same {
        true => Ok(kept),
        // Sized ahead: many megabytes are copied in, which a growing buffer would copy again.
        false => {
            let room = kept.len().saturating_add(1024);
            whole(kept.as_slice(), skip, true, Vec::with_capacity(room))
        }
    }
}

/// [`rewrite`] in one piece, into `out` (an empty archive is its end: two zero blocks).
pub(crate) fn whole<W: Write>(
    archive: impl Read,
    skip: &[&str],
    refuse_special: bool,
    out: W,
) -> Result<W, ArchiveError> {
    let (mut first, mut written) = (Some(out), None);
    rewrite(
        archive,
        skip,
        usize::MAX,
        refuse_special,
        // Asked for once: no entry takes an archive past `usize::MAX` bytes.
        || {
            first
                .take()
                .ok_or_else(|| ArchiveError::Write("it needs a second file".into()))
        },
        |out| written = Some(out),
    )?;
    written.ok_or_else(|| ArchiveError::Write("it was not finished".into()))
}

/// Rewrites `archive` into the writers `fresh` makes, one after another (a new one where the
/// next entry would take one past `max` bytes), each handed to `done` when written.
fn rewrite<W: Write>(
    archive: impl Read,
    skip: &[&str],
    max: usize,
    refuse_special: bool,
    mut fresh: impl FnMut() -> Result<W, ArchiveError>,
    mut done: impl FnMut(W),
) -> Result<(), ArchiveError> {
    let unreadable = |e: std::io::Error| ArchiveError::Unreadable(e.to_string());
    // What the builder failed at: writing, where its writer failed; else reading.
    let built = |out: &Builder<Counted<W>>, e: std::io::Error| match out.get_ref().failed {
        true => ArchiveError::Write(e.to_string()),
        false => unreadable(e),
    };
    let skip: Vec<String> = skip.iter().filter_map(|s| plain(s)).collect();
    let mut reader = Archive::new(archive);
    reader.set_ignore_zeros(true);
    let mut out = Builder::new(Counted::new(fresh()?));
    let mut links: HashSet<String> = HashSet::new();
    let mut seen: HashSet<String> = HashSet::new();
    for entry in reader.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(path) = plain(&raw) else {
            return Err(ArchiveError::OutOfRoot(raw));
        };
        let skipped = |root: &String| path == *root || path.starts_with(&format!("{root}/"));
        if path.is_empty() || skip.iter().any(skipped) {
            continue;
        }
        if let Some(link) = below_link(&path, &links) {
            return Err(ArchiveError::BelowLink { path, link });
        }
        let kind = entry.header().entry_type();
        let mut header = Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(entry.header().mode().map_err(unreadable)? & 0o7777);
        header.set_mtime(entry.header().mtime().unwrap_or(0));
        header.set_size(0);
        match kind {
            EntryType::Regular | EntryType::Continuous => {
                header.set_entry_type(EntryType::Regular);
                let size = entry.size();
                header.set_size(size);
                // Headers (a long name's too) and the data in 512-byte blocks.
                let bytes = usize::try_from(size).unwrap_or(usize::MAX);
                let taken = 1536usize.saturating_add(path.len()).saturating_add(bytes);
                if out.get_ref().bytes > 0 && out.get_ref().bytes.saturating_add(taken) > max {
                    let next = Builder::new(Counted::new(fresh()?));
                    let mut full = std::mem::replace(&mut out, next);
                    full.finish().map_err(|e| built(&full, e))?;
                    done(full.into_inner().map_err(unreadable)?.inner);
                }
                // Straight from the entry into the writer: no copy of the file between.
                let data = Exact {
                    entry: &mut entry,
                    left: size,
                };
                out.append_data(&mut header, &path, data)
                    .map_err(|e| built(&out, e))?;
            }
            EntryType::Directory => {
                out.append_data(&mut header, &path, std::io::empty())
                    .map_err(|e| built(&out, e))?;
            }
            EntryType::Symlink | EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .map(|t| String::from_utf8_lossy(&t).into_owned())
                    .unwrap_or_default();
                if kind == EntryType::Link {
                    // A hard link names a path of the archive, as a member is named.
                    match plain(&target) {
                        Some(t) if seen.contains(&t) => {
                            out.append_link(&mut header, &path, &t)
                                .map_err(|e| built(&out, e))?;
                        }
                        _ => return Err(ArchiveError::HardLinkOut { path, target }),
                    }
                } else {
                    // A symbolic link is kept as it is, never followed: it points where it
                    // pointed in the sandbox.
                    out.append_link(&mut header, &path, &target)
                        .map_err(|e| built(&out, e))?;
                    links.insert(path.clone());
                }
            }
            other if refuse_special => {
                return Err(ArchiveError::Kind {
                    path,
                    kind: kind_name(other),
                });
            }
            _ => continue,
        }
        seen.insert(path);
    }
    out.finish().map_err(|e| built(&out, e))?;
    done(out.into_inner().map_err(unreadable)?.inner);
    Ok(())
}

/// A writer, how many bytes it took, and whether it failed.
struct Counted<W> {
    inner: W,
    bytes: usize,
    failed: bool,
}

impl<W> Counted<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            bytes: 0,
            failed: false,
        }
    }
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf).inspect_err(|_| self.failed = true)?;
        self.bytes += n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush().inspect_err(|_| self.failed = true)
    }
}

/// A writer that compares what it is given with `kept`, from its start.
struct Compare<'a> {
    kept: &'a [u8],
    at: usize,
    same: bool,
}

impl<'a> Compare<'a> {
    fn new(kept: &'a [u8]) -> Self {
        Self {
            kept,
            at: 0,
            same: true,
        }
    }

    /// Whether it was given exactly `kept`.
    fn whole(&self) -> bool {
        self.same && self.at == self.kept.len()
    }
}

impl Write for Compare<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let end = self.at.saturating_add(buf.len());
        self.same = self.same && self.kept.get(self.at..end) == Some(buf);
        self.at = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An entry's data, which must be as long as its header says: a short one is an error, not
/// an archive whose blocks no longer line up.
struct Exact<R> {
    entry: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let n = self.entry.read(buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "an entry ends before its size",
            ));
        }
        self.left = self.left.saturating_sub(n as u64);
        Ok(n)
    }
}

/// `raw` as a plain relative path (`a/b`, the root as ""), or None when it is absolute or
/// climbs with `..`.
fn plain(raw: &str) -> Option<String> {
    if raw.starts_with('/') {
        return None;
    }
    let mut parts = Vec::new();
    for part in raw.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

/// The symbolic link of `links` that `path` lies below, if any.
fn below_link(path: &str, links: &HashSet<String>) -> Option<String> {
    let mut end = 0;
    while let Some(slash) = path[end..].find('/') {
        end += slash;
        if links.contains(&path[..end]) {
            return Some(path[..end].to_owned());
        }
        end += 1;
    }
    None
}

fn kind_name(kind: EntryType) -> &'static str {
    match kind {
        EntryType::Char => "character device",
        EntryType::Block => "block device",
        EntryType::Fifo => "FIFO",
        _ => "special file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(archive: &[u8], skip: &[&str]) -> Result<Vec<u8>, ArchiveError> {
        rewrite_into(archive, skip, Vec::new())
    }

    /// An archive of `entries`: (path, kind, data or link target), its names written raw.
    fn archive(entries: &[(&str, EntryType, &str)]) -> Vec<u8> {
        let mut b = Builder::new(Vec::new());
        for (path, kind, data) in entries {
            let mut h = Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            {
                let name = &mut h.as_old_mut().name;
                name[..path.len()].copy_from_slice(path.as_bytes());
            }
            if matches!(kind, EntryType::Symlink | EntryType::Link) {
                h.set_link_name(data).unwrap();
                h.set_size(0);
                h.set_cksum();
                b.append(&h, std::io::empty()).unwrap();
            } else {
                h.set_size(data.len() as u64);
                h.set_cksum();
                b.append(&h, data.as_bytes()).unwrap();
            }
        }
        b.into_inner().unwrap()
    }

    fn names(archive: &[u8]) -> Vec<String> {
        let mut a = Archive::new(archive);
        a.entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn plain_archives_are_kept_without_their_root_entry() {
        use EntryType::*;
        let a = archive(&[
            ("./", Directory, ""),
            ("./d/", Directory, ""),
            ("./d/f", Regular, "hello"),
            ("./l", Symlink, "/etc/shadow"),
            ("./h", Link, "./d/f"),
        ]);
        let kept = rewritten(&a, &[]).expect("a plain archive");
        assert_eq!(names(&kept), ["d", "d/f", "l", "h"]);
        let mut two = archive(&[("./a", Regular, "1"), ("./r/x", Regular, "in a root")]);
        two.extend(archive(&[("./b", Regular, "2")]));
        let kept = rewritten(&two, &["./r"]).expect("archives one after another");
        assert_eq!(names(&kept), ["a", "b"], "the root left out");
        let big = "x".repeat(3000);
        let parts = split(
            &archive(&[
                ("./a", Regular, "1"),
                ("./big", Regular, &big),
                ("./c", Regular, "3"),
            ]),
            &[],
            2048,
        )
        .unwrap();
        let listed: Vec<Vec<String>> = parts.iter().map(|p| names(p)).collect();
        assert_eq!(
            listed,
            [vec!["a"], vec!["big"], vec!["c"]],
            "whole entries, one too large alone"
        );
    }

    #[test]
    fn paths_out_of_the_root_below_links_or_special_are_refused() {
        use EntryType::*;
        let refused = |entries: &[(&str, EntryType, &str)]| {
            split(&archive(entries), &[], 1 << 20).unwrap_err()
        };
        assert!(matches!(
            refused(&[("../x", Regular, "")]),
            ArchiveError::OutOfRoot(_)
        ));
        assert!(matches!(
            refused(&[("a/../../x", Regular, "")]),
            ArchiveError::OutOfRoot(_)
        ));
        assert!(matches!(
            refused(&[("/etc/x", Regular, "")]),
            ArchiveError::OutOfRoot(_)
        ));
        assert!(matches!(
            refused(&[("./up", Symlink, "/etc"), ("./up/passwd", Regular, "x")]),
            ArchiveError::BelowLink { .. }
        ));
        assert!(matches!(
            refused(&[("./p", Fifo, "")]),
            ArchiveError::Kind { .. }
        ));
        let taken = rewritten(&archive(&[("./p", Fifo, ""), ("./f", Regular, "x")]), &[]).unwrap();
        assert_eq!(names(&taken), ["f"], "a snapshot leaves a FIFO out");
        assert!(matches!(
            refused(&[("./h", Link, "/etc/shadow")]),
            ArchiveError::HardLinkOut { .. }
        ));
        assert!(
            rewritten(&[], &[]).unwrap().iter().all(|&b| b == 0),
            "nothing to keep"
        );
    }

    #[test]
    fn a_kept_archive_is_checked_in_place_and_another_is_written_again() {
        use EntryType::*;
        let mut raw = archive(&[
            ("./d/", Directory, ""),
            ("./d/f", Regular, "hello"),
            ("./l", Symlink, "d/f"),
        ]);
        let mut long = Builder::new(Vec::new());
        let mut h = Header::new_gnu();
        h.set_mode(0o600);
        let data = "a name past the header's 100 bytes";
        h.set_size(data.len() as u64);
        long.append_data(&mut h, "n".repeat(150), data.as_bytes())
            .unwrap();
        raw.extend(long.into_inner().unwrap());
        let kept = rewritten(&raw, &[]).unwrap();
        assert_ne!(kept, raw, "written again, as warden keeps it");
        let checked = |a: &[u8]| super::checked(a, a.len(), &[]);
        assert_eq!(checked(&kept).unwrap(), kept, "warden's own is its rewrite");
        assert_eq!(checked(&raw).unwrap(), kept, "another is written again");
        let mut edited = kept.clone();
        let at = edited.windows(5).position(|w| w == b"hello").unwrap();
        edited[at] = b'j';
        assert_eq!(
            names(&checked(&edited).unwrap()),
            names(&kept),
            "content is content"
        );
        let cut = &kept[..at + 2];
        assert!(
            matches!(checked(cut), Err(ArchiveError::Unreadable(_))),
            "a file cut short is refused, not kept shorter"
        );
    }

    #[test]
    fn a_writer_that_fails_is_told_from_an_archive_that_does() {
        /// Takes `room` bytes, then fails as a full disk does.
        struct Full {
            room: usize,
        }
        impl Write for Full {
            fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
                match self.room.checked_sub(data.len()) {
                    Some(left) => {
                        self.room = left;
                        Ok(data.len())
                    }
                    None => Err(std::io::Error::from(std::io::ErrorKind::StorageFull)),
                }
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let long = "x".repeat(5000);
        let raw = archive(&[
            ("./a", EntryType::Regular, &long),
            ("./b", EntryType::Regular, "y"),
        ]);
        for room in [0, 600, 4000] {
            let failed = rewrite_into(&raw, &[], Full { room }).err();
            assert!(
                matches!(&failed, Some(ArchiveError::Write(why)) if why.contains("no storage space")),
                "{room}: {failed:?}"
            );
        }
        let cut = &raw[..700];
        let failed = rewrite_into(cut, &[], Full { room: 1 << 20 }).err();
        assert!(
            matches!(failed, Some(ArchiveError::Unreadable(_))),
            "{failed:?}"
        );
    }
}
