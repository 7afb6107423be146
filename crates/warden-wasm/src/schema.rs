//! JSON Schemas for the parameters of component functions.
//!
//! A tool is a function exported by a WebAssembly component. A model calls it with a JSON object
//! of arguments; this module describes that object as a JSON Schema (a subset of draft 2020-12),
//! and [`crate::value`] converts between JSON and component values. Both follow one contract:
//!
//! # The JSON conventions
//!
//! The arguments are a JSON object whose keys are the function's parameter names, exactly as
//! written in WIT (kebab-case, e.g. `max-count`). A parameter of type `option<T>` may be omitted
//! or `null`; every other parameter is required. Unknown keys are errors.
//!
//! | component type        | JSON                                                              |
//! |-----------------------|-------------------------------------------------------------------|
//! | `bool`                | `true` / `false`                                                  |
//! | `s8` … `s64`, `u8` … `u64` | an integer within the type's range (no `3.0`, no `"3"`)      |
//! | `f32`, `f64`          | a number; output writes NaN and infinities as `"NaN"`, `"inf"`, `"-inf"` (also accepted as input) |
//! | `char`                | a string of exactly one Unicode scalar value                      |
//! | `string`              | a string                                                          |
//! | `list<T>`             | an array of `T`                                                   |
//! | `list<T, N>`          | an array of exactly `N` items of `T`                              |
//! | `tuple<A, B, …>`      | an array `[a, b, …]` of exactly that length                       |
//! | `record`              | an object with one key per field; `option` fields may be omitted or `null`; unknown keys are errors |
//! | `option<T>`           | `null` for none, else the value of `T`                            |
//! | `enum`                | the case name as a string                                         |
//! | `flags`               | an array of distinct flag names                                   |
//! | `variant`             | `"case"` for a case without payload, `{"case": payload}` for a case with one (`{"case": null}` is accepted for payload-less cases) |
//! | `result<T, E>`        | `{"ok": t}` or `{"err": e}`; a side without payload is `{"ok": null}` (the bare strings `"ok"` / `"err"` are accepted too) |
//! | `map<string, V>`      | an object whose values are `V`                                    |
//!
//! Resources (`own`, `borrow`), `future`, `stream`, `error-context` and maps whose keys are not
//! strings cannot be written in JSON: [`type_schema`] and [`params_schema`] reject them with
//! [`Unsupported`], and a function using them is not offered as a tool.
//!
//! Schemas: integers carry `minimum`/`maximum`; `char` is a string with `minLength` =
//! `maxLength` = 1; tuples use `prefixItems` with `items: false`; records are objects with
//! `additionalProperties: false` and `required` listing the non-`option` fields, and an `option`
//! field's schema is its payload's schema; an `option` anywhere else is
//! `{"anyOf": [T, {"type": "null"}]}`; enums use `enum`; flags are arrays with `uniqueItems`;
//! variants and results are a `oneOf` of `{"const": "case"}` and single-key objects.

use serde_json::{Map, Value, json};
use wasmtime::component::Type;

/// A component type that has no JSON form; names the type (and, from [`params_schema`], the
/// parameter).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported type: {0}")]
pub struct Unsupported(pub String);

/// JSON Schema (draft 2020-12 subset) for one component type.
pub fn type_schema(ty: &Type) -> Result<Value, Unsupported> {
    Ok(match ty {
        Type::Bool => json!({ "type": "boolean" }),
        Type::S8 => int_schema(i8::MIN, i8::MAX),
        Type::U8 => int_schema(u8::MIN, u8::MAX),
        Type::S16 => int_schema(i16::MIN, i16::MAX),
        Type::U16 => int_schema(u16::MIN, u16::MAX),
        Type::S32 => int_schema(i32::MIN, i32::MAX),
        Type::U32 => int_schema(u32::MIN, u32::MAX),
        Type::S64 => int_schema(i64::MIN, i64::MAX),
        Type::U64 => int_schema(u64::MIN, u64::MAX),
        Type::Float32 | Type::Float64 => json!({ "type": "number" }),
        Type::Char => json!({ "type": "string", "minLength": 1, "maxLength": 1 }),
        Type::String => json!({ "type": "string" }),
        Type::List(list) => json!({ "type": "array", "items": type_schema(&list.ty())? }),
        Type::FixedLengthList(list) => json!({
            "type": "array",
            "items": type_schema(&list.ty())?,
            "minItems": list.len(),
            "maxItems": list.len(),
        }),
        Type::Map(map) => {
            if !matches!(map.key(), Type::String) {
                return Err(Unsupported(format!(
                    "{} (only maps with string keys can be written in JSON)",
                    wit_name(ty)
                )));
            }
            json!({ "type": "object", "additionalProperties": type_schema(&map.value())? })
        }
        Type::Record(record) => {
            let fields: Vec<(&str, Type)> = record.fields().map(|f| (f.name, f.ty)).collect();
            object_schema(&fields, &|_| None, "field")?
        }
        Type::Tuple(tuple) => {
            let items = tuple
                .types()
                .map(|t| type_schema(&t))
                .collect::<Result<Vec<_>, _>>()?;
            let n = items.len();
            json!({
                "type": "array",
                "prefixItems": items,
                "minItems": n,
                "maxItems": n,
                "items": false,
            })
        }
        Type::Variant(variant) => {
            let mut one_of = Vec::new();
            for case in variant.cases() {
                one_of.push(match &case.ty {
                    None => json!({ "type": "string", "const": case.name }),
                    Some(payload) => single_key_schema(case.name, type_schema(payload)?),
                });
            }
            json!({ "oneOf": one_of })
        }
        Type::Enum(e) => json!({ "type": "string", "enum": e.names().collect::<Vec<_>>() }),
        Type::Option(option) => {
            json!({ "anyOf": [type_schema(&option.ty())?, { "type": "null" }] })
        }
        Type::Result(result) => {
            let side = |t: Option<Type>| match t {
                Some(t) => type_schema(&t),
                None => Ok(json!({ "type": "null" })),
            };
            json!({ "oneOf": [
                single_key_schema("ok", side(result.ok())?),
                single_key_schema("err", side(result.err())?),
            ] })
        }
        Type::Flags(flags) => json!({
            "type": "array",
            "items": { "type": "string", "enum": flags.names().collect::<Vec<_>>() },
            "uniqueItems": true,
        }),
        Type::Own(_) | Type::Borrow(_) => {
            return Err(Unsupported(format!(
                "{} (resource handles cannot be written in JSON)",
                wit_name(ty)
            )));
        }
        Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            return Err(Unsupported(format!(
                "{} (async values cannot be written in JSON)",
                wit_name(ty)
            )));
        }
    })
}

/// The `parameters` object schema of a function: one property per parameter, `required` lists the
/// parameters whose type is not `option`, `additionalProperties: false`. `docs` gives an optional
/// description per parameter name (added as `"description"`).
pub fn params_schema(
    params: &[(String, Type)],
    docs: &dyn Fn(&str) -> Option<String>,
) -> Result<Value, Unsupported> {
    let fields: Vec<(&str, Type)> = params
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    object_schema(&fields, docs, "parameter")
}

/// Whether a record field or parameter of this type may be omitted (it is an `option`).
pub fn is_optional(ty: &Type) -> bool {
    matches!(ty, Type::Option(_))
}

/// The schema of a record field or parameter: an `option<T>` is `T`'s schema (it is simply not
/// required; `null` is accepted too).
fn field_schema(ty: &Type) -> Result<Value, Unsupported> {
    match ty {
        Type::Option(option) => type_schema(&option.ty()),
        _ => type_schema(ty),
    }
}

/// An object schema for named fields (record fields or parameters).
/// `kind` ("field" or "parameter") names the members in [`Unsupported`] messages.
fn object_schema(
    fields: &[(&str, Type)],
    docs: &dyn Fn(&str) -> Option<String>,
    kind: &str,
) -> Result<Value, Unsupported> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, ty) in fields {
        let schema = field_schema(ty)
            .map_err(|Unsupported(what)| Unsupported(format!("{what} in {kind} `{name}`")))?;
        let schema = match docs(name) {
            Some(doc) => with_description(schema, doc),
            None => schema,
        };
        properties.insert((*name).to_string(), schema);
        if !is_optional(ty) {
            required.push(Value::from(*name));
        }
    }
    Ok(json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    }))
}

/// Puts `"description"` first in an object schema.
fn with_description(schema: Value, doc: String) -> Value {
    match schema {
        Value::Object(rest) => {
            let mut out = Map::new();
            out.insert("description".into(), Value::String(doc));
            out.extend(rest.into_iter().filter(|(k, _)| k != "description"));
            Value::Object(out)
        }
        other => other,
    }
}

fn int_schema(min: impl Into<Value>, max: impl Into<Value>) -> Value {
    json!({ "type": "integer", "minimum": min.into(), "maximum": max.into() })
}

/// `{"key": payload}` with exactly that key.
fn single_key_schema(key: &str, payload: Value) -> Value {
    json!({
        "type": "object",
        "properties": { key: payload },
        "required": [key],
        "additionalProperties": false,
    })
}

/// A short WIT-like name of a type, for messages.
pub(crate) fn wit_name(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::S8 => "s8".into(),
        Type::U8 => "u8".into(),
        Type::S16 => "s16".into(),
        Type::U16 => "u16".into(),
        Type::S32 => "s32".into(),
        Type::U32 => "u32".into(),
        Type::S64 => "s64".into(),
        Type::U64 => "u64".into(),
        Type::Float32 => "f32".into(),
        Type::Float64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::List(l) => format!("list<{}>", wit_name(&l.ty())),
        Type::FixedLengthList(l) => format!("list<{}, {}>", wit_name(&l.ty()), l.len()),
        Type::Map(m) => format!("map<{}, {}>", wit_name(&m.key()), wit_name(&m.value())),
        Type::Record(_) => "record".into(),
        Type::Tuple(t) => {
            let items: Vec<String> = t.types().map(|t| wit_name(&t)).collect();
            format!("tuple<{}>", items.join(", "))
        }
        Type::Variant(_) => "variant".into(),
        Type::Enum(_) => "enum".into(),
        Type::Option(o) => format!("option<{}>", wit_name(&o.ty())),
        Type::Result(r) => match (r.ok(), r.err()) {
            (None, None) => "result".into(),
            (Some(ok), None) => format!("result<{}>", wit_name(&ok)),
            (None, Some(err)) => format!("result<_, {}>", wit_name(&err)),
            (Some(ok), Some(err)) => format!("result<{}, {}>", wit_name(&ok), wit_name(&err)),
        },
        Type::Flags(_) => "flags".into(),
        Type::Own(_) => "own<resource>".into(),
        Type::Borrow(_) => "borrow<resource>".into(),
        Type::Future(f) => match f.ty() {
            Some(t) => format!("future<{}>", wit_name(&t)),
            None => "future".into(),
        },
        Type::Stream(s) => match s.ty() {
            Some(t) => format!("stream<{}>", wit_name(&t)),
            None => "stream".into(),
        },
        Type::ErrorContext => "error-context".into(),
    }
}

/// Builds real component [`Type`]s from WAT, for the tests of this module and [`crate::value`].
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::OnceLock;
    use wasmtime::component::types::ComponentItem;
    use wasmtime::component::{Component, Type};
    use wasmtime::{Config, Engine};

    fn engine() -> &'static Engine {
        static ENGINE: OnceLock<Engine> = OnceLock::new();
        ENGINE.get_or_init(|| {
            let mut config = Config::new();
            config.wasm_component_model_map(true);
            config.wasm_component_model_fixed_length_lists(true);
            Engine::new(&config).expect("engine")
        })
    }

    /// The parameters of a function `(func <params>)` imported by a component. `types` are
    /// named type definitions `(name, body)`; each is imported under its name (named types must
    /// be imported to appear in an import's signature) and can be used as `$name` in later
    /// bodies and in `params`. The body `(sub resource)` imports a resource type.
    pub(crate) fn params(types: &[(&str, &str)], params: &str) -> Vec<(String, Type)> {
        let mut wat = String::from("(component\n");
        for (name, body) in types {
            if *body == "(sub resource)" {
                wat.push_str(&format!("  (import \"{name}\" (type ${name} {body}))\n"));
            } else {
                wat.push_str(&format!(
                    "  (type ${name}-def {body})\n  (import \"{name}\" (type ${name} (eq ${name}-def)))\n"
                ));
            }
        }
        wat.push_str(&format!("  (import \"f\" (func {params}))\n)\n"));
        let engine = engine();
        let component =
            Component::new(engine, &wat).unwrap_or_else(|e| panic!("{e:?}\nin:\n{wat}"));
        let ty = component.component_type();
        let import = ty.get_import(engine, "f").expect("import f");
        let ComponentItem::ComponentFunc(func) = import.ty else {
            panic!("`f` is not a function");
        };
        func.params()
            .map(|(name, ty)| (name.to_string(), ty))
            .collect()
    }

    /// The type of the single parameter `value` written as `ty`.
    pub(crate) fn ty(types: &[(&str, &str)], ty: &str) -> Type {
        let mut p = params(types, &format!("(param \"value\" {ty})"));
        p.pop().expect("one parameter").1
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{params, ty};
    use super::*;

    fn no_docs(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn integers_have_their_ranges() {
        let cases = [
            ("s8", json!(-128), json!(127)),
            ("u8", json!(0), json!(255)),
            ("s16", json!(-32768), json!(32767)),
            ("u16", json!(0), json!(65535)),
            ("s32", json!(-2147483648i64), json!(2147483647)),
            ("u32", json!(0), json!(4294967295u32)),
            ("s64", json!(i64::MIN), json!(i64::MAX)),
            ("u64", json!(0), json!(u64::MAX)),
        ];
        for (name, min, max) in cases {
            let schema = type_schema(&ty(&[], name)).unwrap();
            assert_eq!(
                schema,
                json!({ "type": "integer", "minimum": min, "maximum": max }),
                "{name}"
            );
        }
        let u64_schema = type_schema(&ty(&[], "u64")).unwrap();
        assert_eq!(
            u64_schema.to_string(),
            r#"{"type":"integer","minimum":0,"maximum":18446744073709551615}"#
        );
    }

    #[test]
    fn scalars() {
        assert_eq!(
            type_schema(&ty(&[], "bool")).unwrap(),
            json!({ "type": "boolean" })
        );
        assert_eq!(
            type_schema(&ty(&[], "f32")).unwrap(),
            json!({ "type": "number" })
        );
        assert_eq!(
            type_schema(&ty(&[], "f64")).unwrap(),
            json!({ "type": "number" })
        );
        assert_eq!(
            type_schema(&ty(&[], "char")).unwrap(),
            json!({ "type": "string", "minLength": 1, "maxLength": 1 })
        );
        assert_eq!(
            type_schema(&ty(&[], "string")).unwrap(),
            json!({ "type": "string" })
        );
    }

    #[test]
    fn lists_tuples_options() {
        assert_eq!(
            type_schema(&ty(&[], "(list string)")).unwrap(),
            json!({ "type": "array", "items": { "type": "string" } })
        );
        assert_eq!(
            type_schema(&ty(&[], "(tuple u8 string)")).unwrap(),
            json!({
                "type": "array",
                "prefixItems": [
                    { "type": "integer", "minimum": 0, "maximum": 255 },
                    { "type": "string" },
                ],
                "minItems": 2,
                "maxItems": 2,
                "items": false,
            })
        );
        assert_eq!(
            type_schema(&ty(&[], "(list (option string))")).unwrap(),
            json!({
                "type": "array",
                "items": { "anyOf": [{ "type": "string" }, { "type": "null" }] },
            })
        );
        assert_eq!(
            type_schema(&ty(&[], "(list u8 4)")).unwrap(),
            json!({
                "type": "array",
                "items": { "type": "integer", "minimum": 0, "maximum": 255 },
                "minItems": 4,
                "maxItems": 4,
            })
        );
    }

    #[test]
    fn record_with_option_field() {
        let t = ty(
            &[(
                "point",
                r#"(record (field "x" s32) (field "label" (option string)) (field "tags" (list string)))"#,
            )],
            "$point",
        );
        assert_eq!(
            type_schema(&t).unwrap().to_string(),
            concat!(
                r#"{"type":"object","properties":{"#,
                r#""x":{"type":"integer","minimum":-2147483648,"maximum":2147483647},"#,
                r#""label":{"type":"string"},"#,
                r#""tags":{"type":"array","items":{"type":"string"}}},"#,
                r#""required":["x","tags"],"additionalProperties":false}"#,
            )
        );
    }

    #[test]
    fn enums_flags_variants_results() {
        let t = ty(&[("unit", r#"(enum "meter" "foot")"#)], "$unit");
        assert_eq!(
            type_schema(&t).unwrap(),
            json!({ "type": "string", "enum": ["meter", "foot"] })
        );
        let t = ty(&[("perms", r#"(flags "read" "write")"#)], "$perms");
        assert_eq!(
            type_schema(&t).unwrap(),
            json!({
                "type": "array",
                "items": { "type": "string", "enum": ["read", "write"] },
                "uniqueItems": true,
            })
        );
        let t = ty(
            &[("shape", r#"(variant (case "empty") (case "circle" f64))"#)],
            "$shape",
        );
        assert_eq!(
            type_schema(&t).unwrap(),
            json!({ "oneOf": [
                { "type": "string", "const": "empty" },
                {
                    "type": "object",
                    "properties": { "circle": { "type": "number" } },
                    "required": ["circle"],
                    "additionalProperties": false,
                },
            ] })
        );
        let t = ty(&[], "(result u8 (error string))");
        assert_eq!(
            type_schema(&t).unwrap(),
            json!({ "oneOf": [
                {
                    "type": "object",
                    "properties": { "ok": { "type": "integer", "minimum": 0, "maximum": 255 } },
                    "required": ["ok"],
                    "additionalProperties": false,
                },
                {
                    "type": "object",
                    "properties": { "err": { "type": "string" } },
                    "required": ["err"],
                    "additionalProperties": false,
                },
            ] })
        );
        let t = ty(&[], "(result (error string))");
        assert_eq!(
            type_schema(&t).unwrap()["oneOf"][0]["properties"]["ok"],
            json!({ "type": "null" })
        );
    }

    #[test]
    fn maps() {
        let t = ty(&[], "(map string u32)");
        assert_eq!(
            type_schema(&t).unwrap(),
            json!({
                "type": "object",
                "additionalProperties": { "type": "integer", "minimum": 0, "maximum": 4294967295u32 },
            })
        );
        let err = type_schema(&ty(&[], "(map u32 string)")).unwrap_err();
        assert!(err.0.contains("map<u32, string>"), "{err}");
    }

    #[test]
    fn params_with_docs_and_options() {
        let p = params(
            &[("unit", r#"(enum "meter" "foot")"#)],
            r#"(param "quantity" u32) (param "unit" (option $unit)) (param "note" string)"#,
        );
        let docs = |name: &str| (name == "quantity").then(|| "How many.".to_string());
        let schema = params_schema(&p, &docs).unwrap();
        assert_eq!(
            schema.to_string(),
            concat!(
                r#"{"type":"object","properties":{"#,
                r#""quantity":{"description":"How many.","type":"integer","minimum":0,"maximum":4294967295},"#,
                r#""unit":{"type":"string","enum":["meter","foot"]},"#,
                r#""note":{"type":"string"}},"#,
                r#""required":["quantity","note"],"additionalProperties":false}"#,
            )
        );
        let empty = params_schema(&[], &no_docs).unwrap();
        assert_eq!(
            empty,
            json!({ "type": "object", "properties": {}, "required": [], "additionalProperties": false })
        );
    }

    #[test]
    fn resources_are_unsupported() {
        let p = params(
            &[("file", "(sub resource)")],
            r#"(param "name" string) (param "handles" (list (own $file)))"#,
        );
        let err = params_schema(&p, &no_docs).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("unsupported type: own<resource>"), "{msg}");
        assert!(msg.contains("in parameter `handles`"), "{msg}");
        let err = type_schema(&ty(&[("file", "(sub resource)")], "(borrow $file)")).unwrap_err();
        assert!(err.0.contains("borrow<resource>"), "{err}");
    }

    #[test]
    fn is_optional_only_for_options() {
        assert!(is_optional(&ty(&[], "(option u8)")));
        assert!(!is_optional(&ty(&[], "u8")));
        assert!(!is_optional(&ty(&[], "(list (option u8))")));
    }
}
