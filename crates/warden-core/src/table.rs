//! A policy's `[executor]` table, kept with its positions so that the backend of its kind can
//! parse it into its own config and still name the file and line of every mistake.

use crate::located::{Located, Mistake, PolicyError, line_of};
use serde::de::DeserializeOwned;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

/// The `[executor]` table of one policy, without its `kind` (the envelope's).
#[derive(Debug, Clone)]
pub struct ExecutorTable {
    file: PathBuf,
    /// The policy text, for turning byte offsets into lines.
    text: Arc<str>,
    kind_line: usize,
}

impl ExecutorTable {
    pub(crate) fn new(file: &Path, text: Arc<str>, kind_line: usize) -> Self {
        Self {
            file: file.to_owned(),
            text,
            kind_line,
        }
    }

    /// Deserializes the table into a backend's own spec. Use `Option<Spanned<T>>` fields to
    /// keep lines, and `#[serde(deny_unknown_fields)]` so that a misspelt knob is an error.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, PolicyError> {
        let error = |span: Option<Range<usize>>, message: &str| {
            let line = span.map(|s| self.line(&s));
            PolicyError::new(&self.file, line, format!("[executor]: {message}"))
        };
        // Parsed again rather than kept: the parsed form borrows the text.
        let mut doc = DeTable::parse(&self.text).map_err(|e| error(e.span(), e.message()))?;
        let (_, table) = take_executor(&mut doc).map_err(|m| error(m.span, &m.message))?;
        T::deserialize(ValueDeserializer::from(table)).map_err(|e| error(e.span(), e.message()))
    }

    /// The policy file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The policy's whole text, as it was read and checked.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The policy's folder, against which its relative paths resolve.
    pub fn base(&self) -> &Path {
        self.file.parent().unwrap_or(Path::new("."))
    }

    /// A path written in the policy, resolved against its folder and tidied (`a/../b` is `b`),
    /// without touching the filesystem.
    pub fn path(&self, written: &str) -> PathBuf {
        lexical(&self.base().join(written))
    }

    /// The line of `kind = "..."`: where a missing field is reported.
    pub fn kind_line(&self) -> usize {
        self.kind_line
    }

    /// The line a span of the policy text starts on.
    pub fn line(&self, span: &Range<usize>) -> usize {
        line_of(&self.text, span.start)
    }

    /// A written value with its line.
    pub fn located<T>(&self, value: Spanned<T>) -> Located<T> {
        Located {
            line: self.line(&value.span()),
            value: value.into_inner(),
        }
    }

    /// An error at `line` of the policy file.
    pub fn error(&self, line: usize, message: impl Into<String>) -> PolicyError {
        PolicyError::new(&self.file, Some(line), message)
    }
}

/// `a/b/../c` → `a/c`, without touching the filesystem, so paths read well in the audit.
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `[executor]` as written: its `kind`, and the rest of the table.
type WrittenExecutor<'i> = (Spanned<String>, Spanned<DeValue<'i>>);

/// Takes `[executor]` out of a parsed policy.
pub(crate) fn take_executor<'i>(
    doc: &mut Spanned<DeTable<'i>>,
) -> Result<WrittenExecutor<'i>, Mistake> {
    let executor = doc.get_mut().remove("executor").ok_or_else(|| {
        Mistake::whole("a policy needs an [executor] table with its `kind` (wasm, docker, host)")
    })?;
    let span = executor.span();
    let mut value = executor.into_inner();
    let DeValue::Table(table) = &mut value else {
        return Err(Mistake::at(span, "`executor` must be a table: [executor]"));
    };
    let kind = table
        .remove("kind")
        .ok_or_else(|| Mistake::at(span.clone(), "[executor] needs `kind` (wasm, docker, host)"))?;
    let kind_span = kind.span();
    let DeValue::String(name) = kind.into_inner() else {
        return Err(Mistake::at(
            kind_span,
            "`kind` must be a string, such as \"wasm\"",
        ));
    };
    Ok((
        Spanned::new(kind_span, name.into_owned()),
        Spanned::new(span, value),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_tidied() {
        assert_eq!(
            lexical(Path::new("/a/policies/../target/./x.wasm")),
            PathBuf::from("/a/target/x.wasm")
        );
        assert_eq!(lexical(Path::new("../x")), PathBuf::from("../x"));
    }
}
