//! The conversions between JSON and component values, both ways, with the violations a model
//! reads.

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
            r#"case "empty" has no payload; write "empty" or {"empty": null}, got 1"#.to_string()
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
