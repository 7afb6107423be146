//! What warden writes to a session shell for one command, and the lines the shell answers
//! with. Every line of the protocol starts with [`PREFIX`] and carries a nonce made for that
//! one command; the shell prints them with builtins only (`printf`, `read`, `[`), so it frames
//! a command even when no process can be forked.

use std::hash::{BuildHasher, Hasher};

/// How every line of the protocol starts. The model never reads one: see [`super::frames`].
pub(crate) const PREFIX: &str = "__WARDEN_";

/// What the shell checks before each command: whether its sandbox is out of processes.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    /// Directories where the sandbox's pids cgroup shows inside it (`pids.current`,
    /// `pids.events`); the first readable one counts.
    pub dirs: Vec<String>,
    /// From this many processes on, the sandbox counts as out of them.
    pub full_at: u64,
    /// Forks refused for the limit as of the last command's end: more since means that
    /// something ran the sandbox out of processes between commands.
    pub refused: Option<u64>,
}

/// The framing of one command: the nonce and the lines that start and end it.
#[derive(Debug, Clone)]
pub(crate) struct Framing {
    /// `\n__WARDEN_START_<nonce>`: a line of its own on both streams, before the command.
    pub start: String,
    /// `\n__WARDEN_END_<nonce>`: ends the command on both streams; on stdout followed by
    /// ` <status> <processes> <refused forks> f<shell options>` (see [`Ending`]).
    pub end: String,
    /// `\n__WARDEN_STATE_<nonce>`: on stdout after a command that ran, before the end line,
    /// then the shell's state: `export -p`'s lines, `__WARDEN_CWD` among them (see [`replay`]).
    pub state: String,
}

/// The variable that carries a shell's working directory in its state, quoted as
/// `export -p` quotes any value.
const CWD: &str = "__WARDEN_CWD";

/// What a fresh shell runs, before its first command, to start from another shell's `state`
/// (as [`Framing::state`] carried it): its exported variables, then its working directory.
/// Silent: nothing of it shows in the command's output.
pub(crate) fn replay(state: &str) -> String {
    let quoted = state.replace('\'', r"'\''");
    format!("{{ eval '{quoted}'; cd -- \"${CWD}\"; unset {CWD}; }} >/dev/null 2>&1\n")
}

impl Framing {
    pub(crate) fn new() -> Framing {
        let nonce = nonce();
        Framing {
            start: format!("\n{PREFIX}START_{nonce}"),
            end: format!("\n{PREFIX}END_{nonce}"),
            state: format!("\n{PREFIX}STATE_{nonce}"),
        }
    }

    /// The text for one command. `first` adds what the shell needs once: copies of its
    /// stdout and stderr on fds 3 and 4, which the framing writes to whatever the command
    /// does with 1 and 2 (`exec >/dev/null`). `options` restores, inside the command only, the
    /// shell options that the framing switches off (`set -x`, `set -v`), so that neither a
    /// trace nor an echo of the framing ever shows.
    ///
    /// The command travels as one quoted word run by `command eval`, so a syntax error is its
    /// own failure, not the shell's end; it reads /dev/null, not the channel that carries the
    /// next commands, and runs with fds 3 and 4 closed. The whole is one `{ ...; }` list, read
    /// by the shell before any of it runs, so nothing of the next command is read while this
    /// one runs.
    ///
    /// A subshell of the command (a background job, a pipeline) that fails to fork returns
    /// from the `eval` as if it were the shell: busybox ash then went on to run the framing
    /// and to read the next commands, in as many copies as the fork bomb had processes. The
    /// framing therefore first checks that it runs in the shell itself (`/proc/self/stat`
    /// names the process; `$$` always names the shell) and ends any other process silently.
    pub(crate) fn script(
        &self,
        command: &str,
        options: &str,
        check: Option<&Check>,
        first: bool,
    ) -> String {
        let quoted = format!("{options}{command}").replace('\'', r"'\''");
        let (start, end, state) = (&self.start[1..], &self.end[1..], &self.state[1..]);
        let dirs = check.map_or(&[][..], |c| c.dirs.as_slice());
        // The count of processes and of refused forks, or nothing: read with builtins.
        let count = if dirs.is_empty() {
            "__w_n= __w_e=; ".to_owned()
        } else {
            let reads: Vec<String> = dirs
                .iter()
                .map(|d| {
                    let d = d.replace('\'', r"'\''");
                    format!(
                        "{{ IFS= read -r __w_n <'{d}/pids.current' && \
                         {{ IFS=' ' read -r __w_k __w_e <'{d}/pids.events' || :; }}; }}"
                    )
                })
                .collect();
            format!(
                "__w_n= __w_e=; {{ {}; }} 2>/dev/null || :; \
                 case $__w_n in *[!0-9]*) __w_n=;; esac; case $__w_e in *[!0-9]*) __w_e=;; esac; ",
                reads.join(" || ")
            )
        };
        // Run the command unless the sandbox is out of processes.
        let go = match check {
            Some(c) if !dirs.is_empty() => {
                let mut go = format!("[ \"${{__w_n:-0}}\" -lt {} ]", c.full_at);
                if let Some(refused) = c.refused {
                    go.push_str(&format!(" && [ \"${{__w_e:-0}}\" -le {refused} ]"));
                }
                go
            }
            _ => ":".to_owned(),
        };
        // The shell's state after a command that ran, for a command that overlaps the next:
        // the working directory in a variable exported for a moment, so that `export -p`
        // quotes it as it quotes every value.
        let saved = format!(
            "printf '\\n%s\\n' '{state}' >&3; {CWD}=$PWD; export {CWD}; export -p >&3; \
             unset {CWD}; "
        );
        // After the command, with stderr on /dev/null: a trace of the framing goes nowhere.
        // Its variables are gone when the next command runs; the last `:` leaves none of
        // their names in bash's `$_`.
        let after = |status: &str, saved: &str| {
            format!(
                "{{ __w_rc={status}; \
                 IFS=' ' read -r __w_me __w_x </proc/self/stat || __w_me=$$; \
                 [ \"$__w_me\" = \"$$\" ] || exit 0; __w_f=$-; set +xv; {count}{saved}\
                 printf '\\n%s\\n' '{end}' >&4; \
                 printf '\\n%s %s %s %s f%s\\n' '{end}' \"$__w_rc\" \"$__w_n\" \"$__w_e\" \"$__w_f\" >&3; \
                 unset __w_rc __w_me __w_x __w_n __w_e __w_k __w_f; :; }} 2>/dev/null"
            )
        };
        let once = if first { "exec 3>&1 4>&2\n" } else { "" };
        format!(
            "{once}{{ printf '\\n%s\\n' '{start}' >&4; printf '\\n%s\\n' '{start}' >&3; \
             {count}if {go}; then unset __w_n __w_e __w_k; :; \
             command eval '{quoted}' </dev/null 3>&- 4>&-; {}; else {}; fi; }}\n",
            after("$?", &saved),
            after("-", ""),
        )
    }
}

/// The rest of stdout's end line: ` <status> <processes> <refused forks> f<options>`, with
/// `-` for a command that did not run and nothing for a count the shell could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ending {
    /// `None` when the shell found the session out of processes and did not run it.
    pub status: Option<i64>,
    pub processes: Option<u64>,
    pub refused: Option<u64>,
    /// What to put before the next command to restore the options the framing switched off.
    pub options: String,
}

impl Ending {
    /// Parses the rest of the line, exactly; anything else is not an end line.
    pub(crate) fn parse(rest: &[u8]) -> Option<Ending> {
        let rest = std::str::from_utf8(rest).ok()?;
        let mut fields = rest.strip_prefix(' ')?.split(' ');
        let (status, processes, refused, flags) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        if fields.next().is_some() {
            return None;
        }
        let status = match status {
            "-" => None,
            s if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => Some(s.parse().ok()?),
            _ => return None,
        };
        let count = |field: &str| match field {
            "" => Some(None),
            n if n.bytes().all(|b| b.is_ascii_digit()) => n.parse().ok().map(Some),
            _ => None,
        };
        let (processes, refused) = (count(processes)?, count(refused)?);
        let flags = flags.strip_prefix('f')?;
        if !flags.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        // Lines of their own, run before the command's lines are parsed: a syntax error in
        // the command leaves the options as they were.
        let mut options = String::new();
        if flags.contains('x') {
            options.push_str("set -x\n");
        }
        if flags.contains('v') {
            options.push_str("set -v\n");
        }
        Some(Ending {
            status,
            processes,
            refused,
            options,
        })
    }
}

/// 128 random bits in hex: nonces no command prints by accident or guesses, container names.
/// The hasher's keys are random per process; the time makes each call differ.
pub fn nonce() -> String {
    let half = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    };
    format!("{:016x}{:016x}", half(), half())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_travels_quoted_and_the_nonce_differs_each_time() {
        let f = Framing::new();
        let s = f.script("echo 'it''s' \"$HOME\"", "set -x\n", None, true);
        assert!(s.starts_with("exec 3>&1 4>&2\n{ "));
        assert!(s.contains("command eval 'set -x\necho '\\''it'\\'''\\''s'\\'' \"$HOME\"'"));
        assert!(s.ends_with("fi; }\n"));
        assert_eq!(
            s.matches("\n{ ").count(),
            1,
            "one list after the first line: {s}"
        );
        assert!(!f.script("x", "", None, false).contains("exec 3>&1"));
        assert_ne!(Framing::new().end, f.end);
        assert_eq!(nonce().len(), 32);
    }

    #[test]
    fn an_end_line_is_parsed_exactly() {
        let e = Ending::parse(b" 3 17 0 fhxB").unwrap();
        assert_eq!(
            (e.status, e.processes, e.refused),
            (Some(3), Some(17), Some(0))
        );
        assert_eq!(e.options, "set -x\n");
        let e = Ending::parse(b" - 128 9 f").unwrap();
        assert_eq!(
            (e.status, e.processes, e.refused),
            (None, Some(128), Some(9))
        );
        let e = Ending::parse(b" 0   fs").unwrap();
        assert_eq!((e.processes, e.refused), (None, None));
        for bad in [
            &b""[..],
            b":0",
            b" 0",
            b" 0 1 2",
            b" 0 1 2 s",
            b" 0 1 2 f 2",
            b" x 1 2 f",
            b"  1 2 f",
            b" 0 1 f",
        ] {
            assert_eq!(
                Ending::parse(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
