//! Where in a policy file: a value's line, and an error naming the file and line. Words every
//! part of a policy's reading shares; this module imports none of them.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A mistake in a policy's text, before it is a [`PolicyError`]: the byte span of the
/// offending value when known, and what is wrong with it.
#[derive(Debug)]
pub(crate) struct Mistake {
    pub span: Option<Range<usize>>,
    pub message: String,
}

impl Mistake {
    /// A mistake at `span`.
    pub(crate) fn at(span: Range<usize>, message: impl Into<String>) -> Self {
        Self {
            span: Some(span),
            message: message.into(),
        }
    }

    /// A mistake of the file as a whole.
    pub(crate) fn whole(message: impl Into<String>) -> Self {
        Self {
            span: None,
            message: message.into(),
        }
    }
}

/// A policy that cannot be honoured: names the file, and the line when known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub message: String,
}

impl PolicyError {
    pub fn new(file: &Path, line: Option<usize>, message: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// A value with the line of the policy file it was written on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    pub value: T,
    pub line: usize,
}

/// The 1-based line of a byte offset.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
