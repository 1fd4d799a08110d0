//! Kubernetes resource quantities (`100m`, `1`, `1.5`, `2Gi`, `512Mi`, `1k`, `1e3`) and
//! resource lists. A [`Quantity`] keeps the text it was written with (so objects round-trip
//! unchanged) and its value in milli-units, on which comparisons and the scheduler's
//! arithmetic work. Arithmetic saturates instead of overflowing.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Resource name → quantity, as `corev1.ResourceList` (`cpu`, `memory`, `pods`, ...).
pub type ResourceList = BTreeMap<String, Quantity>;

/// A resource quantity. Equality and order compare values, not spellings: `1` == `1000m`.
#[derive(Clone, Debug)]
pub struct Quantity {
    text: String,
    milli: i128,
}

/// Text that is not a quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {input:?}")]
pub struct QuantityError {
    /// The rejected text.
    pub input: String,
}

fn pow10(exp: u32) -> Option<i128> {
    10i128.checked_pow(exp)
}

/// Exact `mantissa * 10^exp10 * 2^exp2` rounded up to an integer, saturating.
fn scale(mantissa: i128, exp10: i64, exp2: u32) -> i128 {
    let saturated = if mantissa < 0 { i128::MIN } else { i128::MAX };
    let Some(m) = 2i128
        .checked_pow(exp2)
        .and_then(|b| mantissa.checked_mul(b))
    else {
        return saturated;
    };
    if exp10 >= 0 {
        let Some(p) = u32::try_from(exp10).ok().and_then(pow10) else {
            return if m == 0 { 0 } else { saturated };
        };
        m.checked_mul(p).unwrap_or(saturated)
    } else {
        let Some(d) = u32::try_from(-exp10).ok().and_then(pow10) else {
            // Divisor beyond i128: the value is a tiny fraction; round up.
            return i128::from(m > 0);
        };
        let q = m.div_euclid(d);
        if m.rem_euclid(d) == 0 {
            q
        } else {
            q + 1
        }
    }
}

impl Quantity {
    /// Parses a quantity in Kubernetes' syntax.
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let err = || QuantityError {
            input: input.to_string(),
        };
        let s = input.trim();
        let (negative, body) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let num_len = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (number, suffix) = body.split_at(num_len);
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
            return Err(err());
        }
        // Leading zeros do not count toward precision; cap digits to what i128 holds.
        let digits = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        let (digits, dropped) = if digits.len() > 36 {
            (&digits[..36], (digits.len() - 36) as i64)
        } else {
            (digits, 0)
        };
        let mut mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| err())?
        };
        if negative {
            mantissa = -mantissa;
        }
        let (exp10, exp2): (i64, u32) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            s if s.starts_with(['e', 'E']) => {
                let exp = &s[1..];
                let unsigned = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err());
                }
                (exp.parse::<i64>().map_err(|_| err())?, 0)
            }
            _ => return Err(err()),
        };
        let exp10 = exp10 + 3 - frac_part.len() as i64 + dropped;
        Ok(Quantity {
            text: s.to_string(),
            milli: scale(mantissa, exp10, exp2),
        })
    }

    /// A quantity of `milli` milli-units, written canonically (`2`, `1500m`).
    pub fn from_milli(milli: i128) -> Self {
        let text = if milli % 1000 == 0 {
            (milli / 1000).to_string()
        } else {
            format!("{milli}m")
        };
        Quantity { text, milli }
    }

    /// A whole-unit quantity (`3`).
    pub fn from_units(units: i64) -> Self {
        Quantity::from_milli(i128::from(units).saturating_mul(1000))
    }

    /// The value in milli-units, rounded up (`1n` → 1).
    pub fn milli_value(&self) -> i128 {
        self.milli
    }

    /// The value in whole units, rounded up (`1500m` → 2).
    pub fn value(&self) -> i128 {
        let q = self.milli.div_euclid(1000);
        if self.milli.rem_euclid(1000) == 0 {
            q
        } else {
            q + 1
        }
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when the value is zero.
    pub fn is_zero(&self) -> bool {
        self.milli == 0
    }

    /// Sum, saturating.
    pub fn plus(&self, other: &Quantity) -> Quantity {
        Quantity::from_milli(self.milli.saturating_add(other.milli))
    }

    /// Difference, saturating (may be negative).
    pub fn minus(&self, other: &Quantity) -> Quantity {
        Quantity::from_milli(self.milli.saturating_sub(other.milli))
    }

    /// How many whole `per` fit in `self` (floor, never negative); `None` when `per` is not
    /// positive.
    pub fn fits(&self, per: &Quantity) -> Option<i128> {
        (per.milli > 0).then(|| self.milli.max(0) / per.milli)
    }
}

impl Default for Quantity {
    fn default() -> Self {
        Quantity::from_milli(0)
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.milli == other.milli
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.milli.cmp(&other.milli)
    }
}

impl std::hash::Hash for Quantity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.milli.hash(state);
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Kubernetes accepts bare numbers too (`cpu: 1`).
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(serde_json::Number),
        }
        let text = match Raw::deserialize(deserializer)? {
            Raw::Text(s) => s,
            Raw::Number(n) => n.to_string(),
        };
        Quantity::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// `a + b` per resource (resources in either list).
pub fn add_lists(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (name, q) in b {
        let sum = out.get(name).map_or_else(|| q.clone(), |cur| cur.plus(q));
        out.insert(name.clone(), sum);
    }
    out
}

/// `a - b` per resource of `a` (resources only in `b` are ignored); may go negative.
pub fn sub_lists(a: &ResourceList, b: &ResourceList) -> ResourceList {
    a.iter()
        .map(|(name, q)| {
            let diff = b.get(name).map_or_else(|| q.clone(), |sub| q.minus(sub));
            (name.clone(), diff)
        })
        .collect()
}

/// Sum of many lists.
pub fn sum_lists<'a>(lists: impl IntoIterator<Item = &'a ResourceList>) -> ResourceList {
    lists
        .into_iter()
        .fold(ResourceList::new(), |acc, l| add_lists(&acc, l))
}

/// How many replicas requesting `request` each fit in `available`: the minimum over the
/// requested resources (zero requests ignored) of `available / request`, a resource missing
/// from `available` counting as zero. `None` when nothing positive is requested (no limit).
pub fn replicas_that_fit(available: &ResourceList, request: &ResourceList) -> Option<i64> {
    request
        .iter()
        .filter(|(_, q)| q.milli_value() > 0)
        .filter_map(|(name, per)| available.get(name).map_or(Some(0), |avail| avail.fits(per)))
        .min()
        .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let cases: &[(&str, i128)] = &[
            ("0", 0),
            ("1", 1000),
            ("100m", 100),
            ("1.5", 1500),
            ("0.1", 100),
            (".5", 500),
            ("5.", 5000),
            ("+2", 2000),
            ("-2", -2000),
            ("-100m", -100),
            ("1k", 1_000_000),
            ("1M", 1_000_000_000),
            ("1G", 1_000_000_000_000),
            ("1Ki", 1_024_000),
            ("512Mi", 512 * 1024 * 1024 * 1000),
            ("2Gi", 2 * 1024 * 1024 * 1024 * 1000),
            ("1.5Gi", 1536 * 1024 * 1024 * 1000),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("1e-3", 1),
            ("1e+3", 1_000_000),
            ("1n", 1),
            ("1u", 1),
            ("1500u", 2),
            ("1000000n", 1),
            ("0.0001", 1),
            ("110", 110_000),
            ("1Ei", 1_152_921_504_606_846_976_000),
            ("00012", 12_000),
        ];
        for (input, milli) in cases {
            let q = Quantity::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(q.milli_value(), *milli, "{input}");
            assert_eq!(q.to_string(), *input, "{input} keeps its spelling");
        }
    }

    #[test]
    fn rejects_table() {
        for bad in [
            "", "m", "1.2.3", "1x", "1Kb", "1e", "1e+", "Gi", "--1", "1 Gi", "1ki", "0x10",
            "1.5e3.2",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn huge_values_saturate() {
        assert_eq!(Quantity::parse("1e100").unwrap().milli_value(), i128::MAX);
        assert_eq!(Quantity::parse("-1e100").unwrap().milli_value(), i128::MIN);
        assert_eq!(Quantity::parse("1e-100").unwrap().milli_value(), 1);
        assert_eq!(Quantity::parse("0e100").unwrap().milli_value(), 0);
    }

    #[test]
    fn serde_keeps_text_and_accepts_numbers() {
        let list: ResourceList =
            serde_json::from_str(r#"{"cpu":"250m","memory":"1Gi","pods":110,"x":1.5}"#).unwrap();
        assert_eq!(list["pods"].milli_value(), 110_000);
        assert_eq!(list["x"].milli_value(), 1500);
        assert_eq!(
            serde_json::to_string(&list).unwrap(),
            r#"{"cpu":"250m","memory":"1Gi","pods":"110","x":"1.5"}"#
        );
        assert!(serde_json::from_str::<Quantity>(r#""lots""#).is_err());
    }

    #[test]
    fn value_semantics() {
        let q = |s: &str| Quantity::parse(s).unwrap();
        assert_eq!(q("1"), q("1000m"));
        assert_eq!(q("1Ki"), q("1024"));
        assert!(q("100m") < q("1"));
        assert_eq!(q("1500m").value(), 2);
        assert_eq!(q("1").plus(&q("500m")).to_string(), "1500m");
        assert_eq!(q("2").minus(&q("1")).to_string(), "1");
        assert_eq!(q("1").minus(&q("2")).milli_value(), -1000);
        assert_eq!(q("10").fits(&q("3")), Some(3));
        assert_eq!(q("-1").fits(&q("3")), Some(0));
        assert_eq!(q("10").fits(&q("0")), None);
        assert_eq!(Quantity::from_units(4).to_string(), "4");
    }

    #[test]
    fn list_arithmetic_table() {
        let list = |pairs: &[(&str, &str)]| -> ResourceList {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
                .collect()
        };
        let a = list(&[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")]);
        let b = list(&[("cpu", "1500m"), ("memory", "2Gi")]);
        assert_eq!(
            add_lists(&a, &b),
            list(&[("cpu", "5500m"), ("memory", "10Gi"), ("pods", "110")])
        );
        assert_eq!(
            sub_lists(&a, &b),
            list(&[("cpu", "2500m"), ("memory", "6Gi"), ("pods", "110")])
        );
        assert_eq!(sum_lists([&a, &b, &b]), add_lists(&add_lists(&a, &b), &b));

        type Pairs<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(Pairs, Option<i64>)] = &[
            (&[("cpu", "1")], Some(4)),
            (&[("cpu", "1500m")], Some(2)),
            (&[("cpu", "1"), ("memory", "3Gi")], Some(2)),
            (&[("cpu", "100")], Some(0)),
            (&[("nvidia.com/gpu", "1")], Some(0)),
            (&[("cpu", "0")], None),
            (&[], None),
        ];
        for (req, want) in cases {
            assert_eq!(replicas_that_fit(&a, &list(req)), *want, "{req:?}");
        }
    }
}
