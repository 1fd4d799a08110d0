//! Which cluster taints a placement tolerates, and for how long. This is the rule the
//! scheduler's taint filter and the taint manager share (Kubernetes' `ToleratesTaint` with the
//! numeric operators disabled, and Karmada's minimum toleration time).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::cluster::{Taint, TaintEffect};
use crate::policy::{Toleration, TolerationOperator};

/// True when `toleration` tolerates `taint`: effects must agree unless the toleration's is
/// empty, keys must agree unless the toleration's is empty; then `Exists` tolerates any value,
/// `Equal` (or no operator) needs equal values, and `Lt`/`Gt` tolerate nothing.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if toleration.effect.is_some_and(|e| e != taint.effect) {
        return false;
    }
    if !toleration.key.is_empty() && toleration.key != taint.key {
        return false;
    }
    match toleration.operator {
        None | Some(TolerationOperator::Equal) => toleration.value == taint.value,
        Some(TolerationOperator::Exists) => true,
        Some(TolerationOperator::Lt) | Some(TolerationOperator::Gt) => false,
    }
}

/// For each taint, the first toleration that tolerates it (so one toleration may appear more
/// than once). `Err` carries the first taint nothing tolerates. No taints ⇒ `Ok(vec![])`.
pub fn matching_tolerations<'a, 'b>(
    taints: &'b [Taint],
    tolerations: &'a [Toleration],
) -> Result<Vec<&'a Toleration>, &'b Taint> {
    taints
        .iter()
        .map(|taint| {
            tolerations
                .iter()
                .find(|t| tolerates(t, taint))
                .ok_or(taint)
        })
        .collect()
}

/// The first taint with one of `effects` that no toleration tolerates (the scheduler's filter
/// uses NoSchedule and NoExecute).
pub fn first_untolerated<'b>(
    taints: &'b [Taint],
    tolerations: &[Toleration],
    effects: &[TaintEffect],
) -> Option<&'b Taint> {
    taints
        .iter()
        .filter(|t| effects.contains(&t.effect))
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

/// When tolerated taints stop being tolerated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TolerationWait {
    /// Evict now.
    Now,
    /// Look again after this long.
    After(Duration),
    /// Tolerated for ever.
    Forever,
}

/// How long `used` tolerations (from [`matching_tolerations`]) keep tolerating `taints`:
/// no taints ⇒ Forever; no tolerations ⇒ Now; otherwise the earliest `timeAdded +
/// tolerationSeconds` over every (toleration with seconds × taint with timeAdded it
/// tolerates) pair — none ⇒ Forever, not after `now` ⇒ Now, else the time left. So
/// `tolerationSeconds: 0` or negative evicts at once and absent seconds never evict.
pub fn min_toleration_time(
    taints: &[Taint],
    used: &[&Toleration],
    now: DateTime<Utc>,
) -> TolerationWait {
    if taints.is_empty() {
        return TolerationWait::Forever;
    }
    if used.is_empty() {
        return TolerationWait::Now;
    }
    let earliest = used
        .iter()
        .filter_map(|tol| tol.toleration_seconds.map(|s| (tol, s)))
        .flat_map(|(tol, secs)| {
            taints
                .iter()
                .filter(move |taint| tolerates(tol, taint))
                .filter_map(move |taint| {
                    let added = taint.time_added?.as_datetime();
                    added.checked_add_signed(chrono::Duration::try_seconds(secs)?)
                })
        })
        .min();
    match earliest {
        None => TolerationWait::Forever,
        Some(at) if at <= now => TolerationWait::Now,
        Some(at) => (at - now)
            .to_std()
            .map_or(TolerationWait::Now, TolerationWait::After),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::Time;
    use TaintEffect::*;
    use TolerationOperator::*;

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
            time_added: None,
        }
    }

    fn tol(
        key: &str,
        op: Option<TolerationOperator>,
        value: &str,
        effect: Option<TaintEffect>,
    ) -> Toleration {
        Toleration {
            key: key.into(),
            operator: op,
            value: value.into(),
            effect,
            toleration_seconds: None,
        }
    }

    #[test]
    fn tolerates_table() {
        let t = taint("k", "v", NoExecute);
        let empty = taint("k", "", NoSchedule);
        let cases = [
            (tol("k", Some(Equal), "v", Some(NoExecute)), &t, true),
            (tol("k", None, "v", Some(NoExecute)), &t, true),
            (tol("k", None, "v", None), &t, true),
            (tol("k", None, "x", None), &t, false),
            (tol("k", None, "", None), &empty, true),
            (tol("k", None, "", None), &t, false),
            (tol("k", Some(Exists), "", None), &t, true),
            (tol("k", Some(Exists), "", Some(NoSchedule)), &t, false),
            (tol("other", Some(Exists), "", None), &t, false),
            (tol("", Some(Exists), "", None), &t, true),
            (tol("", Some(Exists), "", Some(NoExecute)), &t, true),
            (tol("", Some(Exists), "", Some(PreferNoSchedule)), &t, false),
            (tol("", Some(Equal), "v", None), &t, true),
            (tol("k", Some(Lt), "v", None), &t, false),
            (tol("k", Some(Gt), "v", None), &t, false),
        ];
        for (i, (tol, taint, want)) in cases.iter().enumerate() {
            assert_eq!(
                tolerates(tol, taint),
                *want,
                "case {i}: {tol:?} vs {taint:?}"
            );
        }
    }

    #[test]
    fn matching_tolerations_table() {
        let a = taint("a", "", NoExecute);
        let b = taint("b", "", NoExecute);
        let ta = tol("a", Some(Exists), "", None);
        let tb = tol("b", Some(Exists), "", None);
        let all = tol("", Some(Exists), "", None);

        assert_eq!(matching_tolerations(&[], &[]), Ok(vec![]));
        assert_eq!(
            matching_tolerations(&[], std::slice::from_ref(&ta)),
            Ok(vec![])
        );
        assert_eq!(matching_tolerations(std::slice::from_ref(&a), &[]), Err(&a));
        let taints = [a.clone(), b.clone()];
        assert_eq!(
            matching_tolerations(&taints, &[ta.clone(), tb.clone()]),
            Ok(vec![&ta, &tb])
        );
        assert_eq!(
            matching_tolerations(&taints, std::slice::from_ref(&ta)),
            Err(&taints[1])
        );
        // First tolerating toleration wins, even if a later one is more specific.
        let tols = [all.clone(), ta.clone()];
        assert_eq!(
            matching_tolerations(&taints, &tols),
            Ok(vec![&tols[0], &tols[0]])
        );
        assert_eq!(
            first_untolerated(&taints, std::slice::from_ref(&ta), &[NoSchedule, NoExecute]),
            Some(&taints[1])
        );
        assert_eq!(first_untolerated(&taints, &[], &[NoSchedule]), None);
    }

    #[test]
    fn min_toleration_time_table() {
        let t0 = Time::parse("2024-05-01T10:00:00Z").unwrap();
        let now = Time::parse("2024-05-01T10:01:40Z").unwrap().as_datetime(); // t0 + 100s
        let added = |key: &str| Taint {
            time_added: Some(t0),
            ..taint(key, "", NoExecute)
        };
        let secs = |key: &str, s: Option<i64>| Toleration {
            toleration_seconds: s,
            ..tol(key, Some(Exists), "", None)
        };
        let after = |s: u64| TolerationWait::After(Duration::from_secs(s));
        struct Case {
            name: &'static str,
            taints: Vec<Taint>,
            used: Vec<Toleration>,
            want: TolerationWait,
        }
        let cases = vec![
            Case {
                name: "no taints",
                taints: vec![],
                used: vec![secs("a", Some(1))],
                want: TolerationWait::Forever,
            },
            Case {
                name: "no tolerations",
                taints: vec![added("a")],
                used: vec![],
                want: TolerationWait::Now,
            },
            Case {
                name: "nil seconds tolerate forever",
                taints: vec![added("a")],
                used: vec![secs("a", None)],
                want: TolerationWait::Forever,
            },
            Case {
                name: "zero seconds evict at once",
                taints: vec![added("a")],
                used: vec![secs("a", Some(0))],
                want: TolerationWait::Now,
            },
            Case {
                name: "negative seconds evict at once",
                taints: vec![added("a")],
                used: vec![secs("a", Some(-5))],
                want: TolerationWait::Now,
            },
            Case {
                name: "time left",
                taints: vec![added("a")],
                used: vec![secs("a", Some(300))],
                want: after(200),
            },
            Case {
                name: "expired",
                taints: vec![added("a")],
                used: vec![secs("a", Some(60))],
                want: TolerationWait::Now,
            },
            Case {
                name: "exactly now",
                taints: vec![added("a")],
                used: vec![secs("a", Some(100))],
                want: TolerationWait::Now,
            },
            Case {
                name: "minimum over pairs",
                taints: vec![added("a"), added("b")],
                used: vec![secs("a", Some(300)), secs("b", Some(150))],
                want: after(50),
            },
            Case {
                name: "nil beside seconds: seconds decide",
                taints: vec![added("a"), added("b")],
                used: vec![secs("a", None), secs("b", Some(400))],
                want: after(300),
            },
            Case {
                name: "taint without timeAdded is ignored",
                taints: vec![taint("a", "", NoExecute)],
                used: vec![secs("a", Some(1))],
                want: TolerationWait::Forever,
            },
            Case {
                name: "key-less toleration covers every taint",
                taints: vec![added("a"), added("b")],
                used: vec![secs("", Some(120))],
                want: after(20),
            },
        ];
        for c in cases {
            let used: Vec<&Toleration> = c.used.iter().collect();
            assert_eq!(
                min_toleration_time(&c.taints, &used, now),
                c.want,
                "{}",
                c.name
            );
        }
    }
}
