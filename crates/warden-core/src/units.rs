//! Human units in policy files: durations (`"10s"`) and sizes (`"64MiB"`).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A size or duration a policy wrote that does not read as one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("`{0}` is not a size; write it like \"64MiB\" or \"1GiB\"")]
    NotASize(String),
    #[error("unknown size unit `{unit}` in `{written}`; use B, KB, MB, GB, KiB, MiB or GiB")]
    SizeUnit { unit: String, written: String },
    #[error("size `{0}` is too large")]
    SizeTooLarge(String),
    #[error("`{0}` is not a duration; write it like \"10s\" or \"500ms\"")]
    NotADuration(String),
    #[error("unknown duration unit `{unit}` in `{written}`; use ms, s, m, h or d")]
    DurationUnit { unit: String, written: String },
    #[error("duration `{0}` is out of range")]
    DurationRange(String),
}

/// A byte count written as `"64MiB"`, `"1KiB"`, `"512KB"` or a bare integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = UnitError;

    fn from_str(s: &str) -> Result<Self, UnitError> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().map_err(|_| UnitError::NotASize(s.to_owned()))?;
        let mult: u64 = match unit.trim() {
            "" | "B" => 1,
            "KB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            other => {
                return Err(UnitError::SizeUnit {
                    unit: other.to_owned(),
                    written: s.to_owned(),
                });
            }
        };
        n.checked_mul(mult)
            .map(ByteSize)
            .ok_or_else(|| UnitError::SizeTooLarge(s.to_owned()))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if n >= size && n.is_multiple_of(size) {
                return write!(f, "{}{unit}", n / size);
            }
        }
        write!(f, "{n}B")
    }
}

/// `d` in milliseconds to the microsecond: how a usage figure or a duration is written.
pub fn millis(d: Duration) -> f64 {
    to_the_microsecond(d.as_secs_f64() * 1e3)
}

/// A figure in milliseconds to the microsecond, the finest any clock of a sandbox reports:
/// sums and differences of measured CPU otherwise carry float noise (`3.4011940000000003`).
pub(crate) fn to_the_microsecond(ms: f64) -> f64 {
    (ms * 1e3).round() / 1e3
}

/// Writes a figure in milliseconds as [`to_the_microsecond`] rounds it, for `serialize_with`.
pub fn serialize_ms<S: Serializer>(ms: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    ms.map(to_the_microsecond).serialize(s)
}

/// A duration written as `"500ms"`, `"10s"`, `"2m"`, `"7d"` or a bare number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = UnitError;

    fn from_str(s: &str) -> Result<Self, UnitError> {
        let s = s.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: f64 = num
            .parse()
            .map_err(|_| UnitError::NotADuration(s.to_owned()))?;
        let secs = match unit.trim() {
            "ms" => n / 1000.0,
            "" | "s" => n,
            "m" => n * 60.0,
            "h" => n * 3600.0,
            "d" => n * 86_400.0,
            other => {
                return Err(UnitError::DurationUnit {
                    unit: other.to_owned(),
                    written: s.to_owned(),
                });
            }
        };
        Duration::try_from_secs_f64(secs)
            .map(HumanDuration)
            .map_err(|_| UnitError::DurationRange(s.to_owned()))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

/// Accepts either a string with a unit or a bare integer.
#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Int(u64),
    Str(String),
}

macro_rules! serde_via_str {
    ($ty:ty) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                match Raw::deserialize(d)? {
                    Raw::Int(n) => n.to_string().parse(),
                    Raw::Str(s) => s.parse(),
                }
                .map_err(serde::de::Error::custom)
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    };
}

serde_via_str!(ByteSize);
serde_via_str!(HumanDuration);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_written_to_the_microsecond() {
        // A host command's CPU as the helper sums it, and a session's as a difference.
        for (cpu, written) in [
            (3.4011940000000003, r#"{"cpu_ms":3.401}"#),
            (0.1 + 0.2, r#"{"cpu_ms":0.3}"#),
            (12.0, r#"{"cpu_ms":12.0}"#),
        ] {
            let usage = crate::Usage {
                cpu_ms: Some(cpu),
                ..crate::Usage::default()
            };
            assert_eq!(serde_json::to_string(&usage).unwrap(), written);
        }
        assert_eq!(
            serde_json::to_string(&crate::Usage::default()).unwrap(),
            "{}"
        );
    }

    #[test]
    fn sizes() {
        assert_eq!("64MiB".parse::<ByteSize>().unwrap().0, 64 << 20);
        assert_eq!("1KB".parse::<ByteSize>().unwrap().0, 1000);
        assert_eq!("42".parse::<ByteSize>().unwrap().0, 42);
        assert!("12 parsecs".parse::<ByteSize>().is_err());
        assert!("MiB".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize(256 << 20).to_string(), "256MiB");
    }

    #[test]
    fn durations() {
        assert_eq!(
            "500ms".parse::<HumanDuration>().unwrap().0,
            Duration::from_millis(500)
        );
        assert_eq!("2m".parse::<HumanDuration>().unwrap().0.as_secs(), 120);
        assert_eq!(
            "7d".parse::<HumanDuration>().unwrap().0.as_secs(),
            7 * 86_400
        );
        assert_eq!("1.5s".parse::<HumanDuration>().unwrap().0.as_millis(), 1500);
        assert!("soon".parse::<HumanDuration>().is_err());
        assert!("-1s".parse::<HumanDuration>().is_err());
        assert_eq!(HumanDuration(Duration::from_secs(30)).to_string(), "30s");
    }
}
