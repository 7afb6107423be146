//! Conversion between JSON and component values.
//!
//! Follows the conventions documented in [`crate::schema`]. Input conversion checks the JSON
//! against the component type and collects every violation, each at a JSON Pointer
//! (RFC 6901) into the arguments object, with a message a model can act on.

use serde_json::{Map, Value};
use warden_core::Violation;
use wasmtime::component::{Type, Val};

use crate::schema::{is_optional, wit_name};

mod render;

pub use render::val_to_json;

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
            _ => expected(errs, path, "true or false", v),
        },
        Type::S8 => int(v, path, errs, i8::MIN, i8::MAX).map(Val::S8),
        Type::U8 => int(v, path, errs, u8::MIN, u8::MAX).map(Val::U8),
        Type::S16 => int(v, path, errs, i16::MIN, i16::MAX).map(Val::S16),
        Type::U16 => int(v, path, errs, u16::MIN, u16::MAX).map(Val::U16),
        Type::S32 => int(v, path, errs, i32::MIN, i32::MAX).map(Val::S32),
        Type::U32 => int(v, path, errs, u32::MIN, u32::MAX).map(Val::U32),
        Type::S64 => int(v, path, errs, i64::MIN, i64::MAX).map(Val::S64),
        Type::U64 => int(v, path, errs, u64::MIN, u64::MAX).map(Val::U64),
        Type::Float32 => float32(v, path, errs),
        Type::Float64 => float(v, path, errs).map(Val::Float64),
        Type::Char => {
            let mut chars = v.as_str().map(str::chars);
            match chars.as_mut().map(|c| (c.next(), c.next())) {
                Some((Some(c), None)) => Some(Val::Char(c)),
                _ => expected(errs, path, "a string of exactly one character", v),
            }
        }
        Type::String => match v {
            Value::String(s) => Some(Val::String(s.clone())),
            _ => expected(errs, path, "a string", v),
        },
        Type::List(list) => {
            let Value::Array(items) = v else {
                return expected(errs, path, "an array", v);
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
        Type::Map(map) if matches!(map.key(), Type::String) => {
            string_map(v, &map.value(), path, errs)
        }
        Type::Record(r) => {
            let fields: Vec<(&str, Type)> = r.fields().map(|f| (f.name, f.ty)).collect();
            record(v, &fields, path, errs)
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
                _ => expected(errs, path, &format!("one of {}", quoted_list(names)), v),
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
        Type::Flags(f) => flags(v, &f.names().collect::<Vec<_>>(), path, errs),
        Type::Map(_)
        | Type::Own(_)
        | Type::Borrow(_)
        | Type::Future(_)
        | Type::Stream(_)
        | Type::ErrorContext => unsupported(ty, path, errs),
    }
}

/// The violation "expected `what`, got `v`".
fn expected(errs: &mut Vec<Violation>, path: &str, what: &str, v: &Value) -> Option<Val> {
    violation(errs, path, format!("expected {what}, got {}", describe(v)))
}

/// A number that fits a 32-bit float (or is not finite).
fn float32(v: &Value, path: &str, errs: &mut Vec<Violation>) -> Option<Val> {
    let x = float(v, path, errs)?;
    let narrow = x as f32;
    if x.is_finite() && !narrow.is_finite() {
        let range = format!(
            "a number between {:e} and {:e} (a 32-bit float)",
            f32::MIN,
            f32::MAX
        );
        return expected(errs, path, &range, v);
    }
    Some(Val::Float32(narrow))
}

/// An object whose members are values of `value_ty`, as a map keyed by string.
fn string_map(v: &Value, value_ty: &Type, path: &str, errs: &mut Vec<Violation>) -> Option<Val> {
    let Value::Object(obj) = v else {
        return expected(errs, path, "an object", v);
    };
    let mut entries = Some(Vec::with_capacity(obj.len()));
    for (key, item) in obj {
        let item = json_to_val(item, value_ty, &child(path, key), errs);
        entries = entries.zip(item).map(|(mut entries, item)| {
            entries.push((Val::String(key.clone()), item));
            entries
        });
    }
    entries.map(Val::Map)
}

/// An object with the record's `fields`.
fn record(
    v: &Value,
    fields: &[(&str, Type)],
    path: &str,
    errs: &mut Vec<Violation>,
) -> Option<Val> {
    let Value::Object(obj) = v else {
        let names: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
        let with = format!("an object with the fields {}", names.join(", "));
        return expected(errs, path, &with, v);
    };
    let vals = fields_to_vals(obj, fields, path, errs)?;
    Some(Val::Record(
        fields
            .iter()
            .zip(vals)
            .map(|((name, _), val)| ((*name).to_string(), val))
            .collect(),
    ))
}

/// An array of distinct flag names from `names`; every wrong or repeated item is a violation.
fn flags(v: &Value, names: &[&str], path: &str, errs: &mut Vec<Violation>) -> Option<Val> {
    let Value::Array(items) = v else {
        let what = format!(
            "an array of distinct flag names from {}",
            quoted_list(names.iter().copied())
        );
        return expected(errs, path, &what, v);
    };
    let mut set: Option<Vec<String>> = Some(Vec::with_capacity(items.len()));
    let mut seen: Vec<&str> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item_path = index(path, i);
        let message = match item.as_str() {
            Some(s) if names.contains(&s) && !seen.contains(&s) => {
                seen.push(s);
                if let Some(set) = &mut set {
                    set.push(s.to_string());
                }
                continue;
            }
            Some(s) if names.contains(&s) => format!(
                "duplicate flag {}; list each flag at most once",
                describe(item)
            ),
            _ => format!(
                "expected one of {}, got {}",
                quoted_list(names.iter().copied()),
                describe(item)
            ),
        };
        set = None;
        errs.push(Violation::new(item_path, message));
    }
    set.map(Val::Flags)
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
mod tests;
