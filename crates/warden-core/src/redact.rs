//! Secrets never flow back to the model: granted secret values become `[redacted:NAME]`.

use serde_json::Value;

/// The secret values in force for one call, by name.
#[derive(Debug, Clone, Default)]
pub struct Secrets(Vec<(String, String)>);

impl Secrets {
    /// Longest values first, so a secret that contains another is replaced whole.
    pub fn new(mut pairs: Vec<(String, String)>) -> Self {
        pairs.retain(|(_, v)| !v.is_empty());
        pairs.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        Self(pairs)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `text` with every secret value replaced.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (name, value) in &self.0 {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), &format!("[redacted:{name}]"));
            }
        }
        out
    }

    /// Redacts every string (and object key) inside `value`.
    pub fn redact_value(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => *s = self.redact(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    self.redact_value(&mut v);
                    map.insert(self.redact(&k), v);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_values_everywhere() {
        let s = Secrets::new(vec![
            ("TOKEN".into(), "abc123".into()),
            ("LONG".into(), "abc123xyz".into()),
        ]);
        assert_eq!(
            s.redact("t=abc123xyz and abc123"),
            "t=[redacted:LONG] and [redacted:TOKEN]"
        );
        let mut v = serde_json::json!({"a": ["abc123"], "abc123": 1, "n": 5});
        s.redact_value(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"a": ["[redacted:TOKEN]"], "[redacted:TOKEN]": 1, "n": 5})
        );
    }
}
