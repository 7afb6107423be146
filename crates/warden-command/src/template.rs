//! The command line of a docker or host tool: an argv template whose `{name}` holes the call's string
//! arguments fill, its JSON Schema, and the checking of one call's arguments.
//!
//! Arguments land in argv elements, never in a shell line warden builds itself: a template
//! without a shell runs no shell.

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use warden_core::{ErrorKind, ToolError, Violation};

/// Names a template may not use: they are the executor's own arguments.
const RESERVED: [&str; 2] = ["timeout", "restart"];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Hole(String),
}

/// Why an argv template cannot be used; names the element and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A hole whose name is not one of letters, digits and `_`.
    #[error(
        "argv element `{element}` has a hole `{{{name}}}`: holes are names of letters, digits \
         and _ (write `{{{{` for a brace)"
    )]
    BadHole { element: String, name: String },
    /// A hole named like an argument every command tool has.
    #[error("`{{{0}}}` cannot be a hole: `{0}` is an argument of every command tool")]
    Reserved(String),
    /// A `}` that closes nothing.
    #[error("argv element `{0}` has a lone `}}`; write `}}}}` for a brace")]
    LoneBrace(String),
}

/// A parsed argv template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    elements: Vec<Vec<Piece>>,
    /// The holes, in order of first use.
    params: Vec<String>,
}

impl Template {
    /// Parses `argv`; `{{` and `}}` are literal braces.
    pub fn parse(argv: &[String]) -> Result<Template, TemplateError> {
        let mut params: Vec<String> = Vec::new();
        let mut elements = Vec::new();
        for element in argv {
            let mut pieces = Vec::new();
            let mut text = String::new();
            let mut chars = element.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '{' if chars.peek() == Some(&'{') => {
                        chars.next();
                        text.push('{');
                    }
                    '}' if chars.peek() == Some(&'}') => {
                        chars.next();
                        text.push('}');
                    }
                    '{' => {
                        let name: String = chars.by_ref().take_while(|&c| c != '}').collect();
                        check_name(&name, element)?;
                        if !text.is_empty() {
                            pieces.push(Piece::Text(std::mem::take(&mut text)));
                        }
                        if !params.contains(&name) {
                            params.push(name.clone());
                        }
                        pieces.push(Piece::Hole(name));
                    }
                    '}' => {
                        return Err(TemplateError::LoneBrace(element.clone()));
                    }
                    other => text.push(other),
                }
            }
            if !text.is_empty() || pieces.is_empty() {
                pieces.push(Piece::Text(text));
            }
            elements.push(pieces);
        }
        Ok(Template { elements, params })
    }

    /// The argument names, in order of first use.
    pub fn params(&self) -> &[String] {
        &self.params
    }

    /// For `[SHELL, "-c", "{command}"]`, the shell: the only form a session can drive.
    pub fn shell(&self) -> Option<&str> {
        match self.elements.as_slice() {
            [shell, dash_c, command] => match (shell.as_slice(), dash_c.as_slice()) {
                ([Piece::Text(sh)], [Piece::Text(c)])
                    if c == "-c" && command == &[Piece::Hole("command".into())] =>
                {
                    Some(sh)
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// The command line of a whole program in this tool's sandbox (`warden exec`): `argv`
    /// as given, or for none the tool's shell, when its command line runs one.
    pub fn program(&self, argv: Vec<String>) -> Result<Vec<String>, ToolError> {
        if !argv.is_empty() {
            return Ok(argv);
        }
        match self.shell() {
            Some(shell) => Ok(vec![shell.to_owned()]),
            None => Err(ToolError::new(
                ErrorKind::InvalidArguments,
                "this tool's command line does not run a shell, so there is none to start: \
                 name the program after `--` (`warden exec TOOL -- PROGRAM ARGS…`)",
            )),
        }
    }

    /// What a model reads of a tool whose policy writes no description: what a call runs,
    /// `sandbox` (where it runs and what it sees, e.g. "in a sandboxed container (IMAGE)"),
    /// and what it answers. `session`: one shell kept for the conversation.
    pub fn describe(&self, session: bool, sandbox: &str) -> String {
        let what = if session {
            "Runs a shell command in this conversation's own long-lived shell (`cd`, variables \
             and files carry over to the next command; `restart: true` starts afresh)"
                .to_owned()
        } else if self.shell().is_some() {
            "Runs a shell command".to_owned()
        } else {
            format!("Runs a command with arguments: {}", self.params.join(", "))
        };
        format!(
            "{what} {sandbox}, with no network unless granted and an empty environment; answers \
             its stdout, stderr and exit code."
        )
    }

    /// The argv for one call; every hole has a value (checked by [`Request::parse`]).
    pub fn render(&self, values: &BTreeMap<String, String>) -> Vec<String> {
        self.elements
            .iter()
            .map(|pieces| {
                pieces
                    .iter()
                    .map(|p| match p {
                        Piece::Text(t) => t.as_str(),
                        Piece::Hole(name) => values.get(name).map_or("", String::as_str),
                    })
                    .collect()
            })
            .collect()
    }

    /// The JSON Schema of the arguments. In a session `command` may be left out when
    /// `restart` is true.
    pub fn schema(&self, max_timeout: Duration, session: bool) -> Value {
        let mut props = Map::new();
        for name in &self.params {
            let description = if name == "command" && self.shell().is_some() {
                "The shell command to run.".to_owned()
            } else {
                format!("Put in place of `{{{name}}}` in the command line.")
            };
            props.insert(
                name.clone(),
                json!({"type": "string", "description": description}),
            );
        }
        props.insert(
            "timeout".into(),
            json!({
                "type": "number",
                "exclusiveMinimum": 0,
                "description": format!(
                    "Seconds this command may run; at most {} (the policy's limit).",
                    max_timeout.as_secs_f64()
                ),
            }),
        );
        let mut required: Vec<&String> = self.params.iter().collect();
        if session {
            props.insert(
                "restart".into(),
                json!({
                    "type": "boolean",
                    "description": "Start a fresh shell first: the working directory, \
                        variables and files outside the granted folders are lost."
                }),
            );
            required.retain(|p| *p != "command");
        }
        json!({
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": false,
        })
    }
}

fn check_name(name: &str, element: &str) -> Result<(), TemplateError> {
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(TemplateError::BadHole {
            element: element.to_owned(),
            name: name.to_owned(),
        });
    }
    if RESERVED.contains(&name) {
        return Err(TemplateError::Reserved(name.to_owned()));
    }
    Ok(())
}

/// One call's arguments, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub values: BTreeMap<String, String>,
    /// What the model asked for, if anything (not yet capped by the policy).
    pub timeout: Option<Duration>,
    pub restart: bool,
}

impl Request {
    /// Checks `args` against the template; every violation is listed.
    pub fn parse(args: &Value, template: &Template, session: bool) -> Result<Self, Vec<Violation>> {
        let Some(obj) = args.as_object() else {
            return Err(vec![Violation::new(
                "",
                "expected a JSON object of arguments",
            )]);
        };
        let mut violations = Vec::new();
        let mut request = Request {
            values: BTreeMap::new(),
            timeout: None,
            restart: false,
        };
        for (key, value) in obj {
            let path = format!("/{}", key.replace('~', "~0").replace('/', "~1"));
            match key.as_str() {
                "timeout" => match value.as_f64() {
                    Some(t) if t > 0.0 && t.is_finite() => {
                        request.timeout = Duration::try_from_secs_f64(t).ok();
                    }
                    _ => violations.push(Violation::new(path, "expected a number of seconds > 0")),
                },
                "restart" if session => match value.as_bool() {
                    Some(b) => request.restart = b,
                    None => violations.push(Violation::new(path, "expected true or false")),
                },
                name if template.params.iter().any(|p| p == name) => match value.as_str() {
                    Some(s) if s.contains('\0') => violations.push(Violation::new(
                        path,
                        "contains a NUL byte, which no command line can carry",
                    )),
                    Some(s) => {
                        request.values.insert(name.to_owned(), s.to_owned());
                    }
                    None => violations.push(Violation::new(path, "expected a string")),
                },
                other => {
                    let mut known: Vec<&str> = template.params.iter().map(String::as_str).collect();
                    known.push("timeout");
                    if session {
                        known.push("restart");
                    }
                    violations.push(Violation::new(
                        path,
                        format!(
                            "unknown field `{other}`; expected one of: {}",
                            known.join(", ")
                        ),
                    ));
                }
            }
        }
        for name in &template.params {
            let optional = session && name == "command" && request.restart;
            // Present but refused above (not a string, a NUL byte) is one problem, told once.
            if !obj.contains_key(name) && !optional {
                let hint = if session && name == "command" {
                    " (or `restart: true` alone)"
                } else {
                    ""
                };
                violations.push(Violation::new(
                    format!("/{name}"),
                    format!("missing: `{name}` is required{hint}"),
                ));
            }
        }
        if violations.is_empty() {
            Ok(request)
        } else {
            Err(violations)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(argv: &[&str]) -> Result<Template, TemplateError> {
        Template::parse(
            &argv
                .iter()
                .map(std::string::ToString::to_string)
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn holes_are_filled_in_place() {
        let tpl = t(&["grep", "-e", "{pattern}", "--file={path}", "{{x}}"]).unwrap();
        assert_eq!(tpl.params(), ["pattern", "path"]);
        let values = BTreeMap::from([
            ("pattern".to_owned(), "a b; rm -rf /".to_owned()),
            ("path".to_owned(), "/w".to_owned()),
        ]);
        assert_eq!(
            tpl.render(&values),
            ["grep", "-e", "a b; rm -rf /", "--file=/w", "{x}"]
        );
        assert!(tpl.shell().is_none());
    }

    #[test]
    fn bad_templates_are_refused() {
        assert!(t(&["x", "{1x}"]).unwrap_err().to_string().contains("hole"));
        assert!(
            t(&["x", "{timeout}"])
                .unwrap_err()
                .to_string()
                .contains("every command tool")
        );
        assert!(t(&["x", "a}b"]).unwrap_err().to_string().contains("lone"));
    }

    #[test]
    fn a_shell_template_is_recognised() {
        assert_eq!(
            t(&["/bin/sh", "-c", "{command}"]).unwrap().shell(),
            Some("/bin/sh")
        );
        assert!(
            t(&["/bin/sh", "-c", "x {command}"])
                .unwrap()
                .shell()
                .is_none()
        );
    }

    #[test]
    fn requests_are_checked() {
        let tpl = t(&["/bin/sh", "-c", "{command}"]).unwrap();
        let ok = Request::parse(&json!({"command": "ls", "timeout": 1.5}), &tpl, false).unwrap();
        assert_eq!(ok.timeout, Some(Duration::from_millis(1500)));
        let bad =
            Request::parse(&json!({"timeout": -1, "restart": true}), &tpl, false).unwrap_err();
        let paths: Vec<&str> = bad.iter().map(|v| v.path.as_str()).collect();
        assert_eq!(paths, ["/timeout", "/restart", "/command"]);
        let restart = Request::parse(&json!({"restart": true}), &tpl, true).unwrap();
        assert!(restart.restart && restart.values.is_empty());
        assert!(Request::parse(&json!({}), &tpl, true).is_err());
        assert!(Request::parse(&json!({"command": "a\u{0}b"}), &tpl, false).is_err());
    }

    #[test]
    fn an_argument_of_the_wrong_type_is_not_also_missing() {
        let tpl = t(&["/bin/sh", "-c", "{command}"]).unwrap();
        for (args, session) in [
            (json!({"command": 5}), false),
            (json!({"command": 5}), true),
            (json!({"command": "a\u{0}b"}), false),
        ] {
            let bad = Request::parse(&args, &tpl, session).unwrap_err();
            assert_eq!(bad.len(), 1, "{args}: {bad:?}");
            assert_eq!(bad[0].path, "/command");
            assert!(!bad[0].message.contains("missing"), "{bad:?}");
        }
        let missing = Request::parse(&json!({}), &tpl, false).unwrap_err();
        assert!(missing[0].message.starts_with("missing"), "{missing:?}");
    }
}
