//! Conversion between JSON and component values.
//!
//! Follows the conventions documented in [`crate::schema`]. Input conversion checks the JSON
//! against the component type and collects every violation, each at a JSON Pointer
//! (RFC 6901) into the arguments object, with a message a model can act on.

use serde_json::{Map, Value};
use warden_core::Violation;
use wasmtime::component::{Type, Val};

use crate::schema::{is_optional, wit_name};

/// Converts the JSON arguments object into component values in parameter order.
///
/// Collects every violation, each at a JSON Pointer such as `/quantity/unit` or `/items/3`; the
/// arguments object itself is at `""`. A parameter of type `option` may be omitted or `null`;
/// other parameters are required; unknown keys are violations.
pub fn args_to_vals(args: &Value, params: &[(String, Type)]) -> Result<Vec<Val>, Vec<Violation>> {
    let Some(obj) = args.as_object() else {
        return Err(vec![Violation::new(
            "",
            format!(
                "expected a JSON object of arguments, got {}",
                describe(args)
            ),
        )]);
    };
    let mut errs = Vec::new();
    let fields: Vec<(&str, Type)> = params
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    let vals = fields_to_vals(obj, &fields, "", &mut errs);
    match vals {
        Some(vals) if errs.is_empty() => Ok(vals),
        _ => Err(errs),
    }
}

/// Converts one JSON value to a value of the given type, pushing violations (under `path`, a JSON
/// Pointer) to `errs`. Returns `None` exactly when it pushed at least one violation.
pub fn json_to_val(v: &Value, ty: &Type, path: &str, errs: &mut Vec<Violation>) -> Option<Val> {
    let before = errs.len();
    let val = convert(v, ty, path, errs);
    match val {
        Some(val) if errs.len() == before => Some(val),
        Some(_) => None,
        None => {
            if errs.len() == before {
                errs.push(Violation::new(path, format!("invalid {}", wit_name(ty))));
            }
            None
        }
    }
}

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

fn float_to_json(x: f64) -> Value {
    match serde_json::Number::from_f64(x) {
        Some(n) => Value::Number(n),
        None if x.is_nan() => Value::String("NaN".into()),
        None if x > 0.0 => Value::String("inf".into()),
        None => Value::String("-inf".into()),
    }
}

fn single_key(key: &str, v: Value) -> Value {
    let mut obj = Map::new();
    obj.insert(key.to_string(), v);
    Value::Object(obj)
}

/// The JSON Pointer of a child: `path` + `/` + the escaped token (RFC 6901: `~` → `~0`,
/// `/` → `~1`).
fn child(path: &str, token: &str) -> String {
    let mut out = String::with_capacity(path.len() + token.len() + 1);
    out.push_str(path);
    out.push('/');
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

fn index(path: &str, i: usize) -> String {
    format!("{path}/{i}")
}

/// A short description of a JSON value for messages: `null`, `true`, `3.5`, `"yard"`,
/// `an array`, `an object`.
fn describe(v: &Value) -> String {
    const MAX_CHARS: usize = 60;
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            if s.chars().count() > MAX_CHARS {
                let head: String = s.chars().take(MAX_CHARS).collect();
                format!("{}… (a string)", Value::String(head))
            } else {
                Value::String(s.clone()).to_string()
            }
        }
        Value::Array(items) => format!("an array of {} items", items.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// `"a", "b", "c"`
fn quoted_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    names
        .into_iter()
        .map(|n| Value::String(n.to_string()).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn violation(errs: &mut Vec<Violation>, path: &str, message: String) -> Option<Val> {
    errs.push(Violation::new(path, message));
    None
}

/// The conversion proper; may return `Some` even after pushing violations (callers use
/// [`json_to_val`]).
fn convert(v: &Value, ty: &Type, path: &str, errs: &mut Vec<Violation>) -> Option<Val> {
    match ty {
        Type::Bool => match v {
            Value::Bool(b) => Some(Val::Bool(*b)),
            _ => violation(
                errs,
                path,
                format!("expected true or false, got {}", describe(v)),
            ),
        },
        Type::S8 => int(v, path, errs, i8::MIN, i8::MAX).map(Val::S8),
        Type::U8 => int(v, path, errs, u8::MIN, u8::MAX).map(Val::U8),
        Type::S16 => int(v, path, errs, i16::MIN, i16::MAX).map(Val::S16),
        Type::U16 => int(v, path, errs, u16::MIN, u16::MAX).map(Val::U16),
        Type::S32 => int(v, path, errs, i32::MIN, i32::MAX).map(Val::S32),
        Type::U32 => int(v, path, errs, u32::MIN, u32::MAX).map(Val::U32),
        Type::S64 => int(v, path, errs, i64::MIN, i64::MAX).map(Val::S64),
        Type::U64 => int(v, path, errs, u64::MIN, u64::MAX).map(Val::U64),
        Type::Float32 => {
            let x = float(v, path, errs)?;
            let narrow = x as f32;
            if x.is_finite() && !narrow.is_finite() {
                return violation(
                    errs,
                    path,
                    format!(
                        "expected a number between {:e} and {:e} (a 32-bit float), got {}",
                        f32::MIN,
                        f32::MAX,
                        describe(v)
                    ),
                );
            }
            Some(Val::Float32(narrow))
        }
        Type::Float64 => float(v, path, errs).map(Val::Float64),
        Type::Char => {
            let mut chars = v.as_str().map(str::chars);
            match chars.as_mut().map(|c| (c.next(), c.next())) {
                Some((Some(c), None)) => Some(Val::Char(c)),
                _ => violation(
                    errs,
                    path,
                    format!(
                        "expected a string of exactly one character, got {}",
                        describe(v)
                    ),
                ),
            }
        }
        Type::String => match v {
            Value::String(s) => Some(Val::String(s.clone())),
            _ => violation(
                errs,
                path,
                format!("expected a string, got {}", describe(v)),
            ),
        },
        Type::List(list) => {
            let Value::Array(items) = v else {
                return violation(
                    errs,
                    path,
                    format!("expected an array, got {}", describe(v)),
                );
            };
            let elem = list.ty();
            items_to_vals(items, std::iter::repeat(&elem), path, errs).map(Val::List)
        }
        Type::FixedLengthList(list) => {
            let n = usize::try_from(list.len()).unwrap_or(usize::MAX);
            let items = exact_array(v, n, path, errs)?;
            let elem = list.ty();
            items_to_vals(items, std::iter::repeat(&elem), path, errs).map(Val::FixedLengthList)
        }
        Type::Tuple(tuple) => {
            let types: Vec<Type> = tuple.types().collect();
            let items = exact_array(v, types.len(), path, errs)?;
            items_to_vals(items, types.iter(), path, errs).map(Val::Tuple)
        }
        Type::Map(map) => {
            if !matches!(map.key(), Type::String) {
                return unsupported(ty, path, errs);
            }
            let Value::Object(obj) = v else {
                return violation(
                    errs,
                    path,
                    format!("expected an object, got {}", describe(v)),
                );
            };
            let value_ty = map.value();
            let mut entries = Some(Vec::with_capacity(obj.len()));
            for (key, item) in obj {
                let item = json_to_val(item, &value_ty, &child(path, key), errs);
                entries = entries.zip(item).map(|(mut entries, item)| {
                    entries.push((Val::String(key.clone()), item));
                    entries
                });
            }
            entries.map(Val::Map)
        }
        Type::Record(record) => {
            let fields: Vec<(&str, Type)> = record.fields().map(|f| (f.name, f.ty)).collect();
            let Value::Object(obj) = v else {
                let names: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
                return violation(
                    errs,
                    path,
                    format!(
                        "expected an object with the fields {}, got {}",
                        names.join(", "),
                        describe(v)
                    ),
                );
            };
            let vals = fields_to_vals(obj, &fields, path, errs)?;
            Some(Val::Record(
                fields
                    .iter()
                    .zip(vals)
                    .map(|((name, _), val)| ((*name).to_string(), val))
                    .collect(),
            ))
        }
        Type::Variant(variant) => {
            let cases: Vec<(&str, Option<Type>)> =
                variant.cases().map(|c| (c.name, c.ty)).collect();
            let (name, payload) = tagged(v, path, errs, &cases)?;
            Some(Val::Variant(name.to_string(), payload.map(Box::new)))
        }
        Type::Enum(e) => {
            let names: Vec<&str> = e.names().collect();
            match v.as_str() {
                Some(s) if names.contains(&s) => Some(Val::Enum(s.to_string())),
                _ => violation(
                    errs,
                    path,
                    format!(
                        "expected one of {}, got {}",
                        quoted_list(names),
                        describe(v)
                    ),
                ),
            }
        }
        Type::Option(option) => match v {
            Value::Null => Some(Val::Option(None)),
            _ => json_to_val(v, &option.ty(), path, errs).map(|v| Val::Option(Some(Box::new(v)))),
        },
        Type::Result(result) => {
            let cases = [("ok", result.ok()), ("err", result.err())];
            let (name, payload) = tagged(v, path, errs, &cases)?;
            let payload = payload.map(Box::new);
            Some(Val::Result(if name == "ok" {
                Ok(payload)
            } else {
                Err(payload)
            }))
        }
        Type::Flags(flags) => {
            let names: Vec<&str> = flags.names().collect();
            let Value::Array(items) = v else {
                return violation(
                    errs,
                    path,
                    format!(
                        "expected an array of distinct flag names from {}, got {}",
                        quoted_list(names),
                        describe(v)
                    ),
                );
            };
            let mut set: Option<Vec<String>> = Some(Vec::with_capacity(items.len()));
            let mut seen: Vec<&str> = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let item_path = index(path, i);
                match item.as_str() {
                    Some(s) if names.contains(&s) => {
                        if seen.contains(&s) {
                            set = None;
                            errs.push(Violation::new(
                                item_path,
                                format!(
                                    "duplicate flag {}; list each flag at most once",
                                    describe(item)
                                ),
                            ));
                        } else {
                            seen.push(s);
                            if let Some(set) = &mut set {
                                set.push(s.to_string());
                            }
                        }
                    }
                    _ => {
                        set = None;
                        errs.push(Violation::new(
                            item_path,
                            format!(
                                "expected one of {}, got {}",
                                quoted_list(names.iter().copied()),
                                describe(item)
                            ),
                        ));
                    }
                }
            }
            set.map(Val::Flags)
        }
        Type::Own(_) | Type::Borrow(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            unsupported(ty, path, errs)
        }
    }
}

fn unsupported(ty: &Type, path: &str, errs: &mut Vec<Violation>) -> Option<Val> {
    violation(
        errs,
        path,
        format!("values of type {} cannot be given in JSON", wit_name(ty)),
    )
}

/// An integer of type `T` in `min..=max`; only JSON integers are accepted.
fn int<T>(v: &Value, path: &str, errs: &mut Vec<Violation>, min: T, max: T) -> Option<T>
where
    T: Copy + Into<i128> + TryFrom<i128> + std::fmt::Display,
{
    let n = v
        .as_i64()
        .map(i128::from)
        .or_else(|| v.as_u64().map(i128::from));
    let (lo, hi): (i128, i128) = (min.into(), max.into());
    match n.filter(|n| (lo..=hi).contains(n)).map(T::try_from) {
        Some(Ok(n)) => Some(n),
        _ => {
            errs.push(Violation::new(
                path,
                format!(
                    "expected an integer between {min} and {max}, got {}",
                    describe(v)
                ),
            ));
            None
        }
    }
}

/// Any JSON number, or one of the strings `"NaN"`, `"inf"`, `"-inf"` (as [`val_to_json`] writes
/// non-finite floats).
fn float(v: &Value, path: &str, errs: &mut Vec<Violation>) -> Option<f64> {
    let x = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    };
    if x.is_none() {
        errs.push(Violation::new(
            path,
            format!("expected a number, got {}", describe(v)),
        ));
    }
    x
}

/// An array of exactly `n` items. On a length mismatch this pushes a violation and returns the
/// first `n` (or fewer) items, so that their own violations are reported too; the conversion
/// still fails.
fn exact_array<'v>(
    v: &'v Value,
    n: usize,
    path: &str,
    errs: &mut Vec<Violation>,
) -> Option<&'v [Value]> {
    let Value::Array(items) = v else {
        violation(
            errs,
            path,
            format!(
                "expected an array of exactly {n} items, got {}",
                describe(v)
            ),
        );
        return None;
    };
    if items.len() != n {
        violation(
            errs,
            path,
            format!(
                "expected an array of exactly {n} items, got {} items",
                items.len()
            ),
        );
    }
    Some(&items[..items.len().min(n)])
}

/// Converts every item (reporting all violations); `None` if any failed.
fn items_to_vals<'t>(
    items: &[Value],
    types: impl Iterator<Item = &'t Type>,
    path: &str,
    errs: &mut Vec<Violation>,
) -> Option<Vec<Val>> {
    let mut out = Some(Vec::with_capacity(items.len()));
    for (i, (item, ty)) in items.iter().zip(types).enumerate() {
        let val = json_to_val(item, ty, &index(path, i), errs);
        out = out.zip(val).map(|(mut out, val)| {
            out.push(val);
            out
        });
    }
    out
}

/// Converts the members of a JSON object to the values of named fields (record fields or
/// parameters), in field order. Reports invalid, missing and unknown members; `None` if any.
fn fields_to_vals(
    obj: &Map<String, Value>,
    fields: &[(&str, Type)],
    path: &str,
    errs: &mut Vec<Violation>,
) -> Option<Vec<Val>> {
    let mut out = Some(Vec::with_capacity(fields.len()));
    for (name, ty) in fields {
        let field_path = child(path, name);
        let val = match obj.get(*name) {
            Some(v) => json_to_val(v, ty, &field_path, errs),
            None if is_optional(ty) => Some(Val::Option(None)),
            None => violation(
                errs,
                &field_path,
                format!("missing required field (expected {})", expected_kind(ty)),
            ),
        };
        out = out.zip(val).map(|(mut out, val)| {
            out.push(val);
            out
        });
    }
    for key in obj.keys() {
        if !fields.iter().any(|(name, _)| name == key) {
            out = None;
            let message = if fields.is_empty() {
                format!("unknown field `{key}`; the tool takes no arguments")
            } else {
                let names: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown field `{key}`; expected one of: {}",
                    names.join(", ")
                )
            };
            errs.push(Violation::new(child(path, key), message));
        }
    }
    out
}

/// A phrase for what a value of `ty` looks like, for "missing" messages.
fn expected_kind(ty: &Type) -> String {
    match ty {
        Type::Bool => "true or false".into(),
        Type::S8
        | Type::U8
        | Type::S16
        | Type::U16
        | Type::S32
        | Type::U32
        | Type::S64
        | Type::U64 => {
            format!("an integer ({})", wit_name(ty))
        }
        Type::Float32 | Type::Float64 => "a number".into(),
        Type::Char => "a string of exactly one character".into(),
        Type::String => "a string".into(),
        Type::List(_) | Type::FixedLengthList(_) | Type::Tuple(_) | Type::Flags(_) => {
            "an array".into()
        }
        Type::Map(_) | Type::Record(_) => "an object".into(),
        Type::Enum(e) => format!("one of {}", quoted_list(e.names())),
        Type::Variant(v) => {
            let cases: Vec<(&str, Option<Type>)> = v.cases().map(|c| (c.name, c.ty)).collect();
            format!("one of {}", tagged_forms(&cases))
        }
        Type::Result(_) => "{\"ok\": …} or {\"err\": …}".into(),
        Type::Option(o) => expected_kind(&o.ty()),
        _ => wit_name(ty),
    }
}

/// `"a", "b", {"c": …}` for the cases of a variant or result.
fn tagged_forms(cases: &[(&str, Option<Type>)]) -> String {
    cases
        .iter()
        .map(|(name, ty)| {
            let key = Value::String((*name).to_string());
            match ty {
                None => key.to_string(),
                Some(_) => format!("{{{key}: …}}"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An externally tagged value: `"case"` (payload-less cases only) or `{"case": payload}` with
/// exactly one key (`null` payload for payload-less cases). Returns the case name and payload.
fn tagged<'c>(
    v: &Value,
    path: &str,
    errs: &mut Vec<Violation>,
    cases: &'c [(&'c str, Option<Type>)],
) -> Option<(&'c str, Option<Val>)> {
    let expected = || format!("expected one of {}", tagged_forms(cases));
    let find = |name: &str| cases.iter().find(|(n, _)| *n == name);
    match v {
        Value::String(s) => match find(s) {
            Some((name, None)) => Some((name, None)),
            Some((_, Some(_))) => {
                let case = describe(v);
                violation(
                    errs,
                    path,
                    format!("case {case} needs a payload: write {{{case}: …}}"),
                );
                None
            }
            None => {
                violation(errs, path, format!("{}, got {}", expected(), describe(v)));
                None
            }
        },
        Value::Object(obj) if obj.len() == 1 => {
            let (key, payload) = obj.iter().next()?;
            let key_json = Value::String(key.clone());
            match find(key) {
                Some((name, None)) => {
                    if payload.is_null() {
                        Some((name, None))
                    } else {
                        violation(
                            errs,
                            &child(path, key),
                            format!(
                                "case {key_json} has no payload; write {key_json} or {{{key_json}: null}}, got {}",
                                describe(payload)
                            ),
                        );
                        None
                    }
                }
                Some((name, Some(ty))) => {
                    let val = json_to_val(payload, ty, &child(path, key), errs)?;
                    Some((name, Some(val)))
                }
                None => {
                    violation(
                        errs,
                        path,
                        format!("{}, got an object with the key {key_json}", expected()),
                    );
                    None
                }
            }
        }
        Value::Object(obj) => {
            violation(
                errs,
                path,
                format!(
                    "{}; an object must have exactly one key (the case), got {} keys",
                    expected(),
                    obj.len()
                ),
            );
            None
        }
        _ => {
            violation(errs, path, format!("{}, got {}", expected(), describe(v)));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::testing::{params, ty};
    use serde_json::json;

    /// Converts `v` as a value of `ty`; the violations as `(path, message)` pairs on failure.
    fn conv(v: Value, t: &Type) -> Result<Val, Vec<(String, String)>> {
        let mut errs = Vec::new();
        let val = json_to_val(&v, t, "/value", &mut errs);
        match val {
            Some(val) => {
                assert!(errs.is_empty(), "{errs:?}");
                Ok(val)
            }
            None => {
                assert!(!errs.is_empty());
                Err(errs.into_iter().map(|e| (e.path, e.message)).collect())
            }
        }
    }

    /// The single violation of converting `v`.
    fn err1(v: Value, t: &Type) -> (String, String) {
        let mut errs = conv(v.clone(), t).expect_err(&format!("{v} should be rejected"));
        assert_eq!(errs.len(), 1, "{errs:?}");
        errs.remove(0)
    }

    /// json → val → json is the identity.
    fn round_trip(v: Value, t: &Type) {
        let val = conv(v.clone(), t).unwrap_or_else(|e| panic!("{v}: {e:?}"));
        assert_eq!(val_to_json(&val), v);
    }

    fn paths(errs: &[Violation]) -> Vec<&str> {
        errs.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn integer_boundaries() {
        let cases: [(&str, i128, i128); 8] = [
            ("s8", i8::MIN.into(), i8::MAX.into()),
            ("u8", 0, u8::MAX.into()),
            ("s16", i16::MIN.into(), i16::MAX.into()),
            ("u16", 0, u16::MAX.into()),
            ("s32", i32::MIN.into(), i32::MAX.into()),
            ("u32", 0, u32::MAX.into()),
            ("s64", i64::MIN.into(), i64::MAX.into()),
            ("u64", 0, u64::MAX.into()),
        ];
        for (name, min, max) in cases {
            let t = ty(&[], name);
            // serde_json parses integers beyond i64/u64 as floats; they are rejected too.
            let num = |n: i128| -> Value { serde_json::from_str(&n.to_string()).unwrap() };
            round_trip(num(min), &t);
            round_trip(num(max), &t);
            round_trip(json!(0), &t);
            for bad in [min - 1, max + 1] {
                let (path, msg) = err1(num(bad), &t);
                assert_eq!(path, "/value");
                assert!(
                    msg.starts_with(&format!(
                        "expected an integer between {min} and {max}, got "
                    )),
                    "{name}: {msg}"
                );
            }
        }
        let u8 = ty(&[], "u8");
        assert_eq!(
            err1(json!(300), &u8).1,
            "expected an integer between 0 and 255, got 300"
        );
        assert_eq!(
            err1(json!(3.5), &u8).1,
            "expected an integer between 0 and 255, got 3.5"
        );
        assert_eq!(
            err1(json!(3.0), &u8).1,
            "expected an integer between 0 and 255, got 3.0"
        );
        assert_eq!(
            err1(json!("3"), &u8).1,
            "expected an integer between 0 and 255, got \"3\""
        );
        assert_eq!(
            err1(json!(null), &u8).1,
            "expected an integer between 0 and 255, got null"
        );
        assert!(matches!(conv(json!(255), &u8), Ok(Val::U8(255))));
        assert!(matches!(
            conv(json!(i64::MIN), &ty(&[], "s64")),
            Ok(Val::S64(i64::MIN))
        ));
        assert!(matches!(
            conv(json!(u64::MAX), &ty(&[], "u64")),
            Ok(Val::U64(u64::MAX))
        ));
    }

    #[test]
    fn floats() {
        let f64_ = ty(&[], "f64");
        let f32_ = ty(&[], "f32");
        round_trip(json!(1.5), &f64_);
        round_trip(json!(0.1), &f64_);
        round_trip(json!(0.1), &f32_);
        round_trip(json!(-2.5e10), &f32_);
        round_trip(json!(1e300), &f64_);
        for s in ["NaN", "inf", "-inf"] {
            round_trip(json!(s), &f64_);
            round_trip(json!(s), &f32_);
        }
        assert!(matches!(conv(json!(3), &f64_), Ok(Val::Float64(x)) if x == 3.0));
        assert_eq!(val_to_json(&Val::Float64(f64::NAN)), json!("NaN"));
        assert_eq!(val_to_json(&Val::Float32(f32::NEG_INFINITY)), json!("-inf"));
        assert_eq!(val_to_json(&Val::Float32(0.1)), json!(0.1));
        let (_, msg) = err1(json!(1e39), &f32_);
        assert!(
            msg.starts_with("expected a number between -3.4028235e38 and 3.4028235e38"),
            "{msg}"
        );
        assert!(msg.ends_with("(a 32-bit float), got 1e+39"), "{msg}");
        assert_eq!(
            err1(json!("1.5"), &f64_).1,
            "expected a number, got \"1.5\""
        );
        assert_eq!(err1(json!(true), &f32_).1, "expected a number, got true");
    }

    #[test]
    fn bools_chars_strings() {
        let b = ty(&[], "bool");
        round_trip(json!(true), &b);
        round_trip(json!(false), &b);
        assert_eq!(
            err1(json!("true"), &b).1,
            "expected true or false, got \"true\""
        );
        let c = ty(&[], "char");
        round_trip(json!("x"), &c);
        round_trip(json!("é"), &c);
        round_trip(json!("🦀"), &c);
        for bad in [json!(""), json!("ab"), json!(7)] {
            let (_, msg) = err1(bad.clone(), &c);
            assert_eq!(
                msg,
                format!("expected a string of exactly one character, got {bad}")
            );
        }
        let s = ty(&[], "string");
        round_trip(json!(""), &s);
        round_trip(json!("hello, world"), &s);
        assert_eq!(err1(json!(5), &s).1, "expected a string, got 5");
        assert_eq!(
            err1(json!({"a": 1}), &s).1,
            "expected a string, got an object"
        );
        let long = "x".repeat(100);
        let msg = err1(json!(long), &ty(&[], "u8")).1;
        assert!(msg.ends_with("… (a string)"), "{msg}");
        assert!(msg.len() < 140, "{msg}");
    }

    #[test]
    fn lists_report_every_bad_item() {
        let t = ty(&[], "(list u8)");
        round_trip(json!([]), &t);
        round_trip(json!([1, 2, 255]), &t);
        let errs = conv(json!([1, -1, 2, 256, "x"]), &t).unwrap_err();
        let paths: Vec<&str> = errs.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["/value/1", "/value/3", "/value/4"]);
        assert_eq!(err1(json!("abc"), &t).1, "expected an array, got \"abc\"");

        let fixed = ty(&[], "(list u8 3)");
        round_trip(json!([1, 2, 3]), &fixed);
        assert!(matches!(
            conv(json!([1, 2, 3]), &fixed),
            Ok(Val::FixedLengthList(_))
        ));
        let errs = conv(json!([1, 300]), &fixed).unwrap_err();
        assert_eq!(
            errs,
            [
                (
                    "/value".to_string(),
                    "expected an array of exactly 3 items, got 2 items".to_string()
                ),
                (
                    "/value/1".to_string(),
                    "expected an integer between 0 and 255, got 300".to_string()
                ),
            ]
        );
    }

    #[test]
    fn tuples() {
        let t = ty(&[], "(tuple u8 string (list bool))");
        round_trip(json!([1, "a", [true, false]]), &t);
        assert_eq!(
            err1(json!([1, "a"]), &t),
            (
                "/value".to_string(),
                "expected an array of exactly 3 items, got 2 items".to_string()
            )
        );
        assert_eq!(
            err1(json!([1, "a", [true], 4]), &t).1,
            "expected an array of exactly 3 items, got 4 items"
        );
        assert_eq!(
            err1(json!({"0": 1}), &t).1,
            "expected an array of exactly 3 items, got an object"
        );
        let errs = conv(json!([1000, 2, [true, 1]]), &t).unwrap_err();
        let paths: Vec<&str> = errs.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["/value/0", "/value/1", "/value/2/1"]);
    }

    const QUANTITY: &[(&str, &str)] = &[
        ("unit", r#"(enum "meter" "foot")"#),
        (
            "quantity",
            r#"(record (field "amount" f64) (field "unit" $unit) (field "note" (option string)))"#,
        ),
    ];

    #[test]
    fn records_report_invalid_missing_and_unknown_fields() {
        let t = ty(QUANTITY, "$quantity");
        round_trip(json!({"amount": 2.5, "unit": "foot", "note": "about"}), &t);
        round_trip(json!({"amount": 2.5, "unit": "foot", "note": null}), &t);
        // The omitted option field comes back as null.
        let val = conv(json!({"unit": "meter", "amount": 1.0}), &t).unwrap();
        assert_eq!(
            val_to_json(&val),
            json!({"amount": 1.0, "unit": "meter", "note": null})
        );
        let Val::Record(fields) = val else {
            panic!("not a record")
        };
        assert_eq!(fields[2], ("note".to_string(), Val::Option(None)));

        let errs = conv(json!({"unit": "yard", "colour": "red", "a/b~": 1}), &t).unwrap_err();
        assert_eq!(
            errs,
            [
                (
                    "/value/amount".to_string(),
                    "missing required field (expected a number)".to_string()
                ),
                (
                    "/value/unit".to_string(),
                    r#"expected one of "meter", "foot", got "yard""#.to_string()
                ),
                (
                    "/value/colour".to_string(),
                    "unknown field `colour`; expected one of: amount, unit, note".to_string()
                ),
                (
                    "/value/a~1b~0".to_string(),
                    "unknown field `a/b~`; expected one of: amount, unit, note".to_string()
                ),
            ]
        );
        assert_eq!(
            err1(json!([2.5, "foot"]), &t).1,
            "expected an object with the fields amount, unit, note, got an array of 2 items"
        );
    }

    #[test]
    fn options() {
        let t = ty(&[], "(option u8)");
        round_trip(json!(null), &t);
        round_trip(json!(7), &t);
        assert!(matches!(conv(json!(null), &t), Ok(Val::Option(None))));
        assert_eq!(err1(json!(256), &t).0, "/value");
        let nested = ty(&[], "(list (option string))");
        round_trip(json!(["a", null, "b"]), &nested);
        let errs = conv(json!(["a", 1]), &nested).unwrap_err();
        assert_eq!(errs[0].0, "/value/1");
    }

    #[test]
    fn enums() {
        let t = ty(&[("unit", r#"(enum "meter" "foot")"#)], "$unit");
        round_trip(json!("meter"), &t);
        round_trip(json!("foot"), &t);
        assert_eq!(
            err1(json!("yard"), &t).1,
            r#"expected one of "meter", "foot", got "yard""#
        );
        assert_eq!(
            err1(json!(0), &t).1,
            r#"expected one of "meter", "foot", got 0"#
        );
    }

    #[test]
    fn flags() {
        let t = ty(&[("perms", r#"(flags "read" "write" "exec")"#)], "$perms");
        round_trip(json!([]), &t);
        round_trip(json!(["read", "exec"]), &t);
        round_trip(json!(["read", "write", "exec"]), &t);
        let errs = conv(json!(["read", "delete", "read", 3]), &t).unwrap_err();
        assert_eq!(
            errs,
            [
                (
                    "/value/1".to_string(),
                    r#"expected one of "read", "write", "exec", got "delete""#.to_string()
                ),
                (
                    "/value/2".to_string(),
                    r#"duplicate flag "read"; list each flag at most once"#.to_string()
                ),
                (
                    "/value/3".to_string(),
                    r#"expected one of "read", "write", "exec", got 3"#.to_string()
                ),
            ]
        );
        assert_eq!(
            err1(json!("read"), &t).1,
            r#"expected an array of distinct flag names from "read", "write", "exec", got "read""#
        );
    }

    #[test]
    fn variants() {
        let t = ty(
            &[(
                "shape",
                r#"(variant (case "empty") (case "circle" f64) (case "polygon" (list (tuple f64 f64))))"#,
            )],
            "$shape",
        );
        round_trip(json!("empty"), &t);
        round_trip(json!({"circle": 1.5}), &t);
        round_trip(json!({"polygon": [[0.0, 0.0], [1.0, 0.5]]}), &t);
        let val = conv(json!({"empty": null}), &t).unwrap();
        assert!(matches!(&val, Val::Variant(c, None) if c == "empty"));
        assert_eq!(val_to_json(&val), json!("empty"));

        let expected = r#"expected one of "empty", {"circle": …}, {"polygon": …}"#;
        assert_eq!(
            err1(json!("square"), &t),
            ("/value".to_string(), format!(r#"{expected}, got "square""#))
        );
        assert_eq!(
            err1(json!({"square": 2}), &t),
            (
                "/value".to_string(),
                format!(r#"{expected}, got an object with the key "square""#)
            )
        );
        assert_eq!(
            err1(json!("circle"), &t).1,
            r#"case "circle" needs a payload: write {"circle": …}"#
        );
        assert_eq!(
            err1(json!({"empty": 1}), &t),
            (
                "/value/empty".to_string(),
                r#"case "empty" has no payload; write "empty" or {"empty": null}, got 1"#
                    .to_string()
            )
        );
        assert_eq!(
            err1(json!({"circle": 1.0, "empty": null}), &t).1,
            format!("{expected}; an object must have exactly one key (the case), got 2 keys")
        );
        assert_eq!(
            err1(json!({"polygon": [[0.0, 0.0], [1.0, "x"]]}), &t).0,
            "/value/polygon/1/1"
        );
        assert_eq!(err1(json!(null), &t).1, format!("{expected}, got null"));
    }

    #[test]
    fn results() {
        let t = ty(&[], "(result u8 (error string))");
        round_trip(json!({"ok": 3}), &t);
        round_trip(json!({"err": "bad"}), &t);
        assert!(matches!(
            conv(json!({"ok": 3}), &t),
            Ok(Val::Result(Ok(Some(_))))
        ));
        assert_eq!(
            err1(json!({"ok": "3"}), &t),
            (
                "/value/ok".to_string(),
                r#"expected an integer between 0 and 255, got "3""#.to_string()
            )
        );
        assert_eq!(
            err1(json!(3), &t).1,
            r#"expected one of {"ok": …}, {"err": …}, got 3"#
        );
        let unit_ok = ty(&[], "(result (error string))");
        round_trip(json!({"ok": null}), &unit_ok);
        round_trip(json!({"err": "no"}), &unit_ok);
        assert!(matches!(
            conv(json!("ok"), &unit_ok),
            Ok(Val::Result(Ok(None)))
        ));
        let bare = ty(&[], "(result)");
        round_trip(json!({"ok": null}), &bare);
        round_trip(json!({"err": null}), &bare);
        assert_eq!(
            val_to_json(&Val::Result(Err(Some(Box::new(Val::String("e".into())))))),
            json!({"err": "e"})
        );
    }

    #[test]
    fn maps() {
        let t = ty(&[], "(map string u32)");
        round_trip(json!({}), &t);
        round_trip(json!({"a": 1, "b/c": 2}), &t);
        assert_eq!(err1(json!({"a": 1, "b/c": -2}), &t).0, "/value/b~1c");
        let t = ty(&[], "(map u32 string)");
        assert_eq!(
            err1(json!({}), &t).1,
            "values of type map<u32, string> cannot be given in JSON"
        );
        let val = Val::Map(vec![(Val::U32(1), Val::String("one".into()))]);
        assert_eq!(val_to_json(&val), json!({"1": "one"}));
    }

    #[test]
    fn args_collect_every_violation_with_paths() {
        let p = params(
            &[
                ("unit", r#"(enum "meter" "foot")"#),
                ("inner", r#"(record (field "i" u8) (field "j" (list s8)))"#),
            ],
            r#"(param "quantity" u32) (param "unit" (option $unit)) (param "value" $inner) (param "max-count" u8)"#,
        );
        let ok = args_to_vals(
            &json!({"quantity": 3, "value": {"i": 1, "j": [1, -2]}, "max-count": 9}),
            &p,
        )
        .unwrap();
        assert_eq!(ok.len(), 4);
        assert!(matches!(ok[0], Val::U32(3)));
        assert!(matches!(ok[1], Val::Option(None)));
        assert!(matches!(ok[3], Val::U8(9)));
        let ok = args_to_vals(
            &json!({"quantity": 3, "unit": "foot", "value": {"i": 1, "j": []}, "max-count": 9}),
            &p,
        )
        .unwrap();
        assert_eq!(
            val_to_json(&ok[1]),
            json!("foot"),
            "an option param holds Some"
        );
        assert!(matches!(&ok[1], Val::Option(Some(_))));

        let errs = args_to_vals(
            &json!({
                "quantity": -1,
                "unit": null,
                "value": {"i": 1, "j": [1, 2, 300], "k": true},
                "extra": 1,
            }),
            &p,
        )
        .unwrap_err();
        assert_eq!(
            paths(&errs),
            [
                "/quantity",
                "/value/j/2",
                "/value/k",
                "/max-count",
                "/extra"
            ]
        );
        assert_eq!(
            errs[0].message,
            "expected an integer between 0 and 4294967295, got -1"
        );
        assert_eq!(
            errs[1].message,
            "expected an integer between -128 and 127, got 300"
        );
        assert_eq!(errs[2].message, "unknown field `k`; expected one of: i, j");
        assert_eq!(
            errs[3].message,
            "missing required field (expected an integer (u8))"
        );
        assert_eq!(
            errs[4].message,
            "unknown field `extra`; expected one of: quantity, unit, value, max-count"
        );
        let errs = args_to_vals(&json!({}), &p).unwrap_err();
        assert_eq!(paths(&errs), ["/quantity", "/value", "/max-count"]);
        assert_eq!(
            errs[1].message,
            "missing required field (expected an object)"
        );
    }

    #[test]
    fn args_must_be_an_object() {
        let p = params(&[], r#"(param "a" string)"#);
        for bad in [json!(null), json!([1]), json!("a=1")] {
            let errs = args_to_vals(&bad, &p).unwrap_err();
            assert_eq!(errs.len(), 1);
            assert_eq!(errs[0].path, "");
            assert!(
                errs[0]
                    .message
                    .starts_with("expected a JSON object of arguments, got "),
                "{}",
                errs[0].message
            );
        }
        let none = params(&[], "");
        assert!(args_to_vals(&json!({}), &none).unwrap().is_empty());
        let errs = args_to_vals(&json!({"x": 1}), &none).unwrap_err();
        assert_eq!(errs[0].path, "/x");
        assert_eq!(
            errs[0].message,
            "unknown field `x`; the tool takes no arguments"
        );
    }

    #[test]
    fn resources_are_rejected() {
        let t = ty(&[("file", "(sub resource)")], "(own $file)");
        assert_eq!(
            err1(json!(1), &t).1,
            "values of type own<resource> cannot be given in JSON"
        );
    }

    #[test]
    fn nested_round_trip() {
        let t = ty(
            &[
                ("unit", r#"(enum "meter" "foot")"#),
                ("perms", r#"(flags "read" "write")"#),
                ("shape", r#"(variant (case "empty") (case "circle" f32))"#),
                (
                    "thing",
                    r#"(record (field "name" string) (field "initial" char) (field "unit" $unit) (field "perms" $perms) (field "shapes" (list $shape)) (field "pair" (tuple s64 u64)) (field "maybe" (option (list u16))) (field "outcome" (result string (error u8))))"#,
                ),
            ],
            "(list $thing)",
        );
        round_trip(
            json!([{
                "name": "a",
                "initial": "ß",
                "unit": "foot",
                "perms": ["write"],
                "shapes": ["empty", {"circle": 0.25}],
                "pair": [-9_223_372_036_854_775_808i64, 18_446_744_073_709_551_615u64],
                "maybe": [1, 65535],
                "outcome": {"err": 4},
            }, {
                "name": "",
                "initial": "\n",
                "unit": "meter",
                "perms": [],
                "shapes": [],
                "pair": [0, 0],
                "maybe": null,
                "outcome": {"ok": "fine"},
            }]),
            &t,
        );
    }

    #[test]
    fn pointer_escaping() {
        assert_eq!(child("", "a"), "/a");
        assert_eq!(child("/x", "a/b~c"), "/x/a~1b~0c");
        assert_eq!(child("", ""), "/");
    }
}
