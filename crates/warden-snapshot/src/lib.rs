//! Snapshots of a shell session's sandbox: its `/tmp` (the place a shipped shell policy lets
//! a command write) and its shell's working directory and exported variables, kept in
//! warden's home, restored into the same session (rewind) or into another one (a fork, or a
//! sandbox made from a snapshot).
//!
//! - **Taken** by fixed scripts in the session's sandbox, as its user: `tar` of `/tmp` in a
//!   clean shell (as `warden/read` runs) within the policy's `transfer`, its bytes raw beside
//!   the session's shell ([`Dispatcher::pipe_for_client`]; through the session's shell as
//!   base64 where the sandbox starts none beside it); the shell's state printed by the
//!   session's own shell ([`shell::PRINT`]). warden checks the archive and writes it again
//!   straight into the store ([`archive::rewrite_into`]): only plain relative paths, nothing
//!   below a link it holds; FIFOs and devices left out (sockets `tar` leaves out itself).
//! - **Kept** outside every grant (`<home>/snapshots`), written and read past the page
//!   cache where the filesystem allows it ([`direct`]), bounded in number and bytes
//!   ([`store::MAX_SNAPSHOTS`], [`store::MAX_BYTES`]): past them a new snapshot is refused,
//!   no old one evicted. Never kept: variables the policy fills from warden's environment
//!   (`env_from_host`), its secret ones, and the client's (`env_from_caller`): a restore
//!   gets them from the policy and the client as any session does.
//! - **Restored** under the same policy only (its digest), the archive checked again (a
//!   home's files may have been edited): `/tmp` emptied, then the archive moved straight
//!   into `tar` as the sandbox's user (no copy of it in `/tmp`): raw beside the session's
//!   shell, else through base64 a part of whole entries at a time; then the shell's
//!   directory and variables are replayed, quoted by warden ([`unpack`]). A restore that
//!   fails midway leaves `/tmp` part restored, and says so. A fork's sandbox, new, unpacks
//!   the archive while warden checks the rest of it ([`streamed`]), through a FIFO its own
//!   shell holds where warden can take it (no shell started beside it), else raw beside it.
//! - **Read-write roots** are the real folders, changed by each command's transaction: a
//!   snapshot keeps where their history stood, and a restore undoes the calls committed to
//!   them since ([`roots`]). A fork gets copies of them as they stood ([`fork`]), which its
//!   sandbox sees in their place: nothing it does reaches the real folders.
//! - **Not carried**: running processes (background jobs), the shell's functions, aliases
//!   and unexported variables.

pub mod archive;
pub mod direct;
pub mod fork;
pub mod roots;
pub mod shell;
pub mod store;
pub mod streamed;
mod unpack;
use unpack::Fed;

pub use archive::ArchiveError;
pub use fork::ForkRoots;
pub use roots::RootsMark;
pub use shell::ShellState;
pub use store::{MAX_BYTES, MAX_SNAPSHOTS, Meta, Store};

use sha2::Digest as _;
use std::path::PathBuf;
use warden_core::{
    Dispatcher, PipeInput, Piped, Tool, ToolError, base64_lines, clean_command, decode_lines,
};

/// Why a snapshot or a restore failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("no tool named {0:?}")]
    UnknownTool(String),
    #[error(
        "{tool:?} grants read-write roots, and its sandbox in this session writes the real \
         folders {}: a fork there would write them too; fork the snapshot into a session whose \
         sandbox sees copies of them (`Snapshots::fork_roots`)",
        roots.join(", ")
    )]
    ForkOfRoots { tool: String, roots: Vec<String> },
    #[error(
        "snapshot {id} marks the read-write roots {}, and {tool:?} writes {} in this session: \
         restore it into a session of the sandbox it was taken of (or one from it), or fork it",
        marked.join(", "),
        here.join(", ")
    )]
    OtherRoots {
        id: String,
        tool: String,
        marked: Vec<String>,
        here: Vec<String>,
    },
    #[error(
        "the read-write roots hold {bytes} bytes, past the {bound} a fork copies (the bytes a \
         home keeps of snapshots): restore the snapshot into a session instead"
    )]
    RootsTooLarge { bytes: u64, bound: u64 },
    #[error(
        "{0:?}'s session commands write its roots in place, not as transactions (a docker \
         shell under gVisor, or without a transaction store), so a fork's changes cannot be \
         found to commit: copy what it wrote by hand"
    )]
    Untracked(String),
    #[error("the fork's changes were not committed to the real roots: {0}")]
    Commit(warden_tx::TxError),
    #[error("the read-write root {} could not be copied for a fork: {why}", root.display())]
    Copy { root: PathBuf, why: String },
    #[error("the read-write roots could not be put back as they were{}: {source}", undone_note(*.undone))]
    Roots {
        /// Calls undone before the one that could not be.
        undone: usize,
        source: warden_tx::TxError,
    },
    #[error("{0}")]
    Session(ToolError),
    #[error("the sandbox's /tmp could not be archived: {0}")]
    Archive(String),
    #[error(
        "the sandbox's /tmp holds more than the {bound} bytes its policy lets a client move (`transfer`)"
    )]
    TooLarge { bound: u64 },
    #[error(
        "the session's shell did not print its state (it needs `env` and `base64` at /usr/bin or /bin)"
    )]
    NoState,
    #[error(
        "snapshot {id} was taken under policy {then}, and {tool:?} is now under {now}: restore it under the policy it was taken with"
    )]
    PolicyChanged {
        id: String,
        tool: String,
        then: String,
        now: String,
    },
    #[error("snapshot {0} is not an archive warden wrote: {1}")]
    Refused(String, ArchiveError),
    #[error("the snapshot could not be unpacked in the sandbox: {0}")]
    Unpack(String),
    #[error("no snapshot {0} (`warden snapshot list` lists them)")]
    NotFound(String),
    #[error(
        "{count} snapshots of {bytes} bytes with this one: past the {MAX_SNAPSHOTS} snapshots or \
         {MAX_BYTES} bytes a home keeps; delete some (`warden snapshot delete ID`)"
    )]
    Full { count: usize, bytes: u64 },
    #[error("snapshot {}: {why}", path.display())]
    Corrupt { path: PathBuf, why: String },
    #[error("the snapshots at {}: {source}", path.display())]
    Store {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no randomness for a snapshot's id: {0}")]
    Random(String),
}

fn undone_note(undone: usize) -> String {
    match undone {
        0 => String::new(),
        n => format!(" ({n} later calls were undone before)"),
    }
}

impl From<ToolError> for SnapshotError {
    fn from(e: ToolError) -> Self {
        SnapshotError::Session(e)
    }
}

/// Shell functions both scripts use, in `/tmp`, given `$roots` (the policy's roots below
/// `/tmp`, as `./a/b`, a line each): `walk DIR ACT` runs `ACT PATH` on each entry of DIR
/// that neither is a root nor holds one, and walks into those that hold one (a root is a
/// mount of its own, and its parents are the sandbox's, not the user's).
const WALK: &str = "role() {\n\
    set -f; o=$IFS; IFS='\n'\n\
    for r in $roots; do\n\
    if [ \"$1\" = \"$r\" ]; then IFS=$o; set +f; echo root; return; fi\n\
    case \"$r\" in \"$1\"/*) IFS=$o; set +f; echo above; return;; esac\n\
    done; IFS=$o; set +f\n\
    }\n\
    walk() {\n\
    for e in \"$1\"/.[!.]* \"$1\"/..?* \"$1\"/*; do\n\
    if [ -e \"$e\" ] || [ -L \"$e\" ]; then\n\
    case $(role \"$e\") in\n\
    root) ;;\n\
    above) if [ ! -L \"$e\" ]; then walk \"$e\" \"$2\" || return 1; fi ;;\n\
    *) \"$2\" \"$e\" || return 1 ;;\n\
    esac\n\
    fi\n\
    done\n\
    }\n\
    cd /tmp || exit 1\n";

/// Arguments: the roots. Defines `pack PATH`: a `tar` of it on stdout.
const PACK: &str = "roots=$(printf '%s\\n' \"$@\")\n\
    pack() { tar -cf - \"$1\"; }\n";

/// After [`PACK`]: the archive of each entry of `/tmp` (as [`WALK`] finds them), one after
/// another, as they are (beside the session's shell: its status is the command's).
const ARCHIVE_RAW: &str = "walk . pack";

/// After [`PACK`]: the archives through base64, then the status on a line of its own
/// (through the session's shell).
const ARCHIVE: &str = "exec 3>&1\n\
    st=$( { { walk . pack 2>/dev/null; echo \"$?\" >&4; } | base64 >&3; } 4>&1 )\n\
    echo \"WARDEN-END $st\"";

/// The names the scripts run under (`$0`).
const TAKE: &str = "warden-snapshot";
const RESTORE: &str = "warden-restore";

/// How a restore treats the session's read-write roots ([`roots`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restore {
    /// Into the session the snapshot was taken of, or a sandbox made from it: the calls
    /// committed to the roots since are undone; a root changed since by no call is a
    /// `conflict`.
    Rewind,
    /// The same, over what changed since by no call.
    Forced,
    /// Into a new sandbox beside the one it was taken of. Where the policy grants read-write
    /// roots, the sandbox must see copies of them ([`Snapshots::fork_roots`]): one that
    /// writes the real folders is refused.
    Fork,
}

/// Snapshots in a store, taken of and restored into a dispatcher's sessions.
pub struct Snapshots {
    store: Store,
    /// The calls' transactions, which a restore rewinds a session's read-write roots by.
    transactions: std::sync::Arc<warden_tx::Store>,
}

impl Snapshots {
    /// Snapshots kept in `dir` (warden's `<home>/snapshots`), beside the home's
    /// `transactions`.
    pub fn at(dir: &std::path::Path, transactions: std::sync::Arc<warden_tx::Store>) -> Self {
        Self {
            store: Store::at(dir),
            transactions,
        }
    }

    /// The store, to list and delete.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Commits to the real roots what the fork whose copies are `roots` changed in them
    /// since they were made or last committed, as a call of `tool` (within its `[limits]
    /// changes`): answers the call's id and its change set (empty: nothing to commit).
    pub async fn commit_fork(
        &self,
        dispatcher: &Dispatcher,
        tool: &str,
        roots: std::sync::Arc<ForkRoots>,
    ) -> Result<(String, warden_tx::ChangeSet), SnapshotError> {
        let found = snapshotable(dispatcher, tool)?;
        if !found.executor.sessions_are_transactions() {
            return Err(SnapshotError::Untracked(tool.to_owned()));
        }
        let (limit, tool) = (found.limits.changes, tool.to_owned());
        let call = warden_core::next_call_id();
        let transactions = self.transactions.clone();
        let id = call.clone();
        let committed =
            tokio::task::spawn_blocking(move || roots.commit(&transactions, &id, &tool, limit))
                .await
                .map_err(unfinished)?
                .map_err(SnapshotError::Commit)?;
        Ok((call, committed))
    }

    /// Removes what snapshots being written and forks' copies left when their warden
    /// stopped (a server does as it starts; a snapshot and a fork do too, before they begin).
    pub fn sweep(&self) {
        self.store.sweep();
        store::sweep(&self.store.dir().join("forks"), "a fork's copies");
    }

    /// Copies of the read-write roots snapshot `meta` marks, as they stood then, for a
    /// fork's sandbox to see in their place (its policy's roots moved there:
    /// [`ForkRoots::relocate`]); `None` for a snapshot that marks none.
    pub async fn fork_roots(&self, meta: &Meta) -> Result<Option<ForkRoots>, SnapshotError> {
        let Some(mark) = meta.roots.clone() else {
            return Ok(None);
        };
        let forks = self.store.dir().join("forks");
        let transactions = self.transactions.clone();
        tokio::task::spawn_blocking(move || fork::copy(&forks, &transactions, &mark))
            .await
            .map_err(unfinished)?
            .map(Some)
    }

    /// Takes a snapshot of the sandbox of `tool` in `dispatcher`'s session (starting it if
    /// it has not started).
    pub async fn take(&self, dispatcher: &Dispatcher, tool: &str) -> Result<Meta, SnapshotError> {
        let found = snapshotable(dispatcher, tool)?;
        let bound = dispatcher.transfer_bound(tool)?;
        let writable = roots::read_write(found);
        let marked = match writable.is_empty() {
            true => None,
            false => Some(
                roots::mark(&self.transactions, writable)
                    .map_err(|source| SnapshotError::Roots { undone: 0, source })?,
            ),
        };
        let skip = roots_below_tmp(found);
        let roots = strs(&skip);
        let raw = clean_command(&format!("{WALK}{PACK}{ARCHIVE_RAW}"), TAKE, &roots);
        let archive = match dispatcher
            .pipe_for_client(tool, raw, PipeInput::Nothing, bound)
            .await?
        {
            Some(piped) => archived_raw(piped, bound)?,
            None => {
                let command = clean_command(&format!("{WALK}{PACK}{ARCHIVE}"), TAKE, &roots);
                let printed = dispatcher
                    .run_for_client(tool, command, base64_lines(bound) + 64)
                    .await?;
                archived(&printed, bound)?
            }
        };
        // Checked and written again into the store, and hashed, side by side off the
        // runtime's threads, while the shell prints its state. The hash is of the archive as
        // the sandbox wrote it: the same one is written again the same.
        let partial = self.store.begin()?;
        let archive = std::sync::Arc::new(archive);
        let policy = found.policy_digest().to_owned();
        let raw = archive.clone();
        let hashing = tokio::task::spawn_blocking(move || {
            let mut hash = sha2::Sha256::new();
            for part in [policy.as_bytes(), &raw] {
                hash.update((part.len() as u64).to_le_bytes());
                hash.update(part);
            }
            hash
        });
        let owned = skip.clone();
        let store = self.store.dir().to_owned();
        let checking = tokio::task::spawn_blocking(move || {
            archive::rewrite_into(&archive, &strs(&owned), partial).map_err(|e| match e {
                ArchiveError::Write(why) => SnapshotError::Store {
                    path: store,
                    source: std::io::Error::other(why),
                },
                e => SnapshotError::Archive(e.to_string()),
            })
        });
        let shell = self.state(dispatcher, tool, found).await;
        let partial = checking.await.map_err(unfinished)??;
        let mut hash = hashing.await.map_err(unfinished)?;
        let shell = shell?;
        hash.update(serde_json::to_vec(&shell).unwrap_or_default());
        hash.update(serde_json::to_vec(&marked).unwrap_or_default());
        let digest = format!("sha256:{}", hex::encode(hash.finalize()));
        let meta = Meta {
            id: partial.id().to_owned(),
            tool: tool.to_owned(),
            policy_digest: found.policy_digest().to_owned(),
            created_ms: now_ms(),
            // The archive's size as written, which the store sets as it keeps it.
            bytes: 0,
            digest,
            shell,
            roots: marked,
        };
        let meta = self.store.keep(meta, partial)?;
        tracing::info!(id = %meta.id, tool, bytes = meta.bytes, "snapshot taken");
        Ok(meta)
    }

    /// Puts snapshot `id` into the sandbox of `tool` in `dispatcher`'s session: its `/tmp`
    /// becomes the snapshot's, its shell's directory and variables the snapshot's, and its
    /// read-write roots are rewound to where they stood, as `how` says.
    pub async fn restore(
        &self,
        dispatcher: &Dispatcher,
        tool: &str,
        id: &str,
        how: Restore,
    ) -> Result<Meta, SnapshotError> {
        let found = snapshotable(dispatcher, tool)?;
        let meta = self.store.meta(id)?;
        if meta.policy_digest != found.policy_digest() {
            return Err(SnapshotError::PolicyChanged {
                id: id.to_owned(),
                tool: tool.to_owned(),
                then: meta.policy_digest,
                now: found.policy_digest().to_owned(),
            });
        }
        let skip = roots_below_tmp(found);
        let (file, len) = self.store.open_archive(id)?;
        let bound = dispatcher.transfer_bound(tool)?;
        if len > bound {
            return Err(SnapshotError::TooLarge { bound });
        }
        // A fork's sandbox is new, holding nothing to lose should its archive be refused
        // halfway: the archive goes in as it is checked (`unpack::streamed`). Elsewhere it is
        // read and checked whole first, off the runtime's threads while the shell prints its
        // state (which the unpacking does not change), starting the shell if it has not
        // started: a refused one leaves the sandbox as it was.
        let refused = |e| SnapshotError::Refused(id.to_owned(), e);
        let (checking, streaming) = match how {
            Restore::Fork => (None, Some(file)),
            _ => (Some(unpack::check(file, len, skip.clone())), None),
        };
        let now = self.state(dispatcher, tool, found).await;
        let whole = match checking {
            Some(checking) => Some(checking.await.map_err(unfinished)?.map_err(refused)?),
            None => None,
        };
        let now = now?;
        if let Some(mark) = &meta.roots {
            let here = roots::read_write(found);
            let shown = |paths: &[PathBuf]| paths.iter().map(|p| p.display().to_string()).collect();
            // A fork's sandbox sees copies (made as the snapshot found the roots), which are
            // all in the store's `forks`.
            let forks = self.store.dir().join("forks").canonicalize();
            let copies = forks.is_ok_and(|forks| here.iter().all(|root| root.starts_with(&forks)));
            match how {
                Restore::Fork if copies => {}
                Restore::Fork => {
                    return Err(SnapshotError::ForkOfRoots {
                        tool: tool.to_owned(),
                        roots: shown(&here),
                    });
                }
                _ if here != mark.paths => {
                    return Err(SnapshotError::OtherRoots {
                        id: id.to_owned(),
                        tool: tool.to_owned(),
                        marked: shown(&mark.paths),
                        here: shown(&here),
                    });
                }
                _ => {}
            }
        }
        if let Some(mark) = meta.roots.as_ref().filter(|_| how != Restore::Fork) {
            let (transactions, mark) = (self.transactions.clone(), mark.clone());
            let forced = how == Restore::Forced;
            let undone =
                tokio::task::spawn_blocking(move || roots::rewind(&transactions, &mark, forced))
                    .await
                    .map_err(unfinished)?
                    .map_err(|(undone, source)| SnapshotError::Roots { undone, source })?;
            tracing::info!(id, tool, calls = undone.len(), "read-write roots rewound");
        }
        let streamed = match streaming {
            Some(file) => match unpack::fed(dispatcher, tool, file, &skip).await? {
                Fed::Unpacked => true,
                Fed::NotOwn => false,
                Fed::Cannot(file) => unpack::streamed(dispatcher, tool, file, len, &skip).await?,
            },
            None => false,
        };
        if !streamed {
            let whole = match whole {
                Some(whole) => whole,
                // Not its own rewrite, or no shell beside the session's: checked whole.
                None => {
                    let (file, len) = self.store.open_archive(id)?;
                    let checking = unpack::check(file, len, skip.clone());
                    checking.await.map_err(unfinished)?.map_err(refused)?
                }
            };
            unpack::whole(dispatcher, tool, id, &whole, &skip).await?;
        }
        let policy = &found.policy.grants;
        let kept = |name: &str| policy.env.contains_key(name) || dropped(found, name);
        dispatcher
            .run_for_client(tool, meta.shell.replay(&now, kept), 64 * 1024)
            .await?;
        tracing::info!(id, tool, "snapshot restored");
        Ok(meta)
    }

    async fn state(
        &self,
        dispatcher: &Dispatcher,
        tool: &str,
        found: &Tool,
    ) -> Result<ShellState, SnapshotError> {
        let printed = dispatcher
            .run_for_client(tool, shell::PRINT.to_owned(), 1 << 20)
            .await?;
        ShellState::parse(&printed, |name| dropped(found, name)).ok_or(SnapshotError::NoState)
    }
}

/// The policy's roots below `/tmp` as the scripts and the archive's checks take them.
fn strs(roots: &[String]) -> Vec<&str> {
    roots.iter().map(String::as_str).collect()
}

/// A check of an archive that ended without an answer (its thread panicked).
fn unfinished(e: tokio::task::JoinError) -> SnapshotError {
    SnapshotError::Archive(format!("its check did not finish: {e}"))
}

/// The archive [`ARCHIVE_RAW`] wrote, when it ran to its end within `bound` bytes.
fn archived_raw(piped: Piped, bound: u64) -> Result<Vec<u8>, SnapshotError> {
    if piped.overflowed {
        return Err(SnapshotError::TooLarge { bound });
    }
    if !piped.succeeded() {
        return Err(SnapshotError::Archive(format!(
            "tar failed ({}): a file in /tmp its user cannot read?",
            failed(&piped)
        )));
    }
    Ok(piped.stdout)
}

/// How a command beside the session's shell failed, for a message.
fn failed(piped: &Piped) -> String {
    let status = piped
        .status
        .map_or("no exit status".to_owned(), |s| format!("status {s}"));
    match piped.stderr.trim() {
        "" => status,
        said => format!("{status}: {}", said.get(..500).unwrap_or(said)),
    }
}

/// The tool named `tool`.
fn snapshotable<'d>(dispatcher: &'d Dispatcher, tool: &str) -> Result<&'d Tool, SnapshotError> {
    dispatcher
        .toolbox()
        .get(tool)
        .ok_or_else(|| SnapshotError::UnknownTool(tool.to_owned()))
}

/// The roots the policy mounts below the sandbox's `/tmp` (a host shell sees a root at its
/// host path, and a folder of the host's /tmp is there), as the scripts name them: `./a/b`.
fn roots_below_tmp(tool: &Tool) -> Vec<String> {
    tool.policy
        .grants
        .fs
        .iter()
        .filter_map(|g| g.guest.strip_prefix("/tmp/"))
        .map(|rest| format!("./{}", rest.trim_end_matches('/')))
        .collect()
}

/// Whether a snapshot leaves variable `name` out: the policy fills it from warden's
/// environment, calls it secret, or lets the client set it.
fn dropped(tool: &Tool, name: &str) -> bool {
    let grants = &tool.policy.grants;
    [
        &grants.env_from_host,
        &grants.secret_env,
        &grants.env_from_caller,
    ]
    .iter()
    .any(|names| names.iter().any(|n| n == name))
}

/// The archive [`ARCHIVE`] printed: its base64, then `WARDEN-END` and `tar`'s status.
fn archived(printed: &str, bound: u64) -> Result<Vec<u8>, SnapshotError> {
    let printed = printed.trim_end();
    let (text, end) = printed.rsplit_once('\n').unwrap_or(("", printed));
    match end.strip_prefix("WARDEN-END ") {
        Some("0") => {}
        Some(status) => {
            return Err(SnapshotError::Archive(format!(
                "tar ended with status {status}: a file in /tmp its user cannot read?"
            )));
        }
        // No end line: the output limit (the policy's `transfer`) cut it.
        None => return Err(SnapshotError::TooLarge { bound }),
    }
    let bytes = decode_lines(text)
        .ok_or_else(|| SnapshotError::Archive("the sandbox answered no base64".into()))?;
    if bytes.len() as u64 > bound {
        return Err(SnapshotError::TooLarge { bound });
    }
    Ok(bytes)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
