//! Component values rendered as JSON, the way [`crate::schema`] describes them.

use serde_json::{Map, Value};
use wasmtime::component::Val;

/// Renders a component value as JSON, following the conventions of [`crate::schema`]: records are
/// objects, enums strings, flags arrays of names, variants `"case"` or `{"case": payload}`,
/// options the value or `null`, tuples arrays, chars strings, results `{"ok": …}` / `{"err": …}`
/// (with `null` for a side without payload), maps objects (non-string keys are written as their
/// JSON text). Non-finite floats are the strings `"NaN"`, `"inf"` and `"-inf"`. Values that have
/// no JSON form (resources, futures, streams, error contexts) are placeholder strings such as
/// `"<own resource>"`.
pub fn val_to_json(v: &Val) -> Value {
    match v {
        Val::Bool(b) => Value::Bool(*b),
        Val::S8(n) => Value::from(*n),
        Val::U8(n) => Value::from(*n),
        Val::S16(n) => Value::from(*n),
        Val::U16(n) => Value::from(*n),
        Val::S32(n) => Value::from(*n),
        Val::U32(n) => Value::from(*n),
        Val::S64(n) => Value::from(*n),
        Val::U64(n) => Value::from(*n),
        // Through the shortest decimal form of the f32, so that 0.1f32 is 0.1, not
        // 0.10000000149011612.
        Val::Float32(x) => float_to_json(x.to_string().parse::<f64>().unwrap_or(f64::from(*x))),
        Val::Float64(x) => float_to_json(*x),
        Val::Char(c) => Value::String(c.to_string()),
        Val::String(s) => Value::String(s.clone()),
        Val::List(items) | Val::Tuple(items) | Val::FixedLengthList(items) => {
            Value::Array(items.iter().map(val_to_json).collect())
        }
        Val::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|(k, v)| {
                    let key = match val_to_json(k) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (key, val_to_json(v))
                })
                .collect(),
        ),
        Val::Record(fields) => Value::Object(
            fields
                .iter()
                .map(|(name, v)| (name.clone(), val_to_json(v)))
                .collect(),
        ),
        Val::Variant(case, None) => Value::String(case.clone()),
        Val::Variant(case, Some(payload)) => single_key(case, val_to_json(payload)),
        Val::Enum(case) => Value::String(case.clone()),
        Val::Option(None) => Value::Null,
        Val::Option(Some(v)) => val_to_json(v),
        Val::Result(Ok(v)) => single_key("ok", v.as_deref().map_or(Value::Null, val_to_json)),
        Val::Result(Err(v)) => single_key("err", v.as_deref().map_or(Value::Null, val_to_json)),
        Val::Flags(names) => Value::Array(names.iter().cloned().map(Value::String).collect()),
        Val::Resource(r) => Value::String(
            if r.owned() {
                "<own resource>"
            } else {
                "<borrowed resource>"
            }
            .into(),
        ),
        Val::Future(_) => Value::String("<future>".into()),
        Val::Stream(_) => Value::String("<stream>".into()),
        Val::ErrorContext(_) => Value::String("<error-context>".into()),
    }
}

/// A float as a JSON number, or the string naming it when it is not finite.
fn float_to_json(x: f64) -> Value {
    match serde_json::Number::from_f64(x) {
        Some(n) => Value::Number(n),
        None if x.is_nan() => Value::String("NaN".into()),
        None if x > 0.0 => Value::String("inf".into()),
        None => Value::String("-inf".into()),
    }
}

/// `{key: v}`.
fn single_key(key: &str, v: Value) -> Value {
    let mut obj = Map::new();
    obj.insert(key.to_string(), v);
    Value::Object(obj)
}
