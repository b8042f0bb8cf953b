//! How the mirror's changes enter the RIB (on the RIB's single writer).
//!
//! A mirrored route is installed only where the RIB has no route of another origin for its
//! prefix (a configured, connected or control-socket route wins: the kernel's route is
//! counted as shadowed), and only mirrored routes are deleted.

use freeway_route::{Rib, RouteKind};

use crate::translate::Change;

/// What became of the mirror's changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Routes installed or replaced.
    pub installed: u64,
    /// Routes deleted.
    pub deleted: u64,
    /// Kernel routes not installed because a route of another origin holds the prefix.
    pub shadowed: u64,
    /// Kernel routes the RIB refused (full tables, bad next hops).
    pub refused: u64,
}

/// Applies a batch of changes to `rib`, counting in `n`: one publication for the whole batch
/// ([`Rib::batch`]).
pub fn apply(rib: &mut Rib, changes: Vec<Change>, n: &mut Applied) {
    rib.batch(|rib| apply_each(rib, changes, n));
}

fn apply_each(rib: &mut Rib, changes: Vec<Change>, n: &mut Applied) {
    for c in changes {
        match c {
            Change::Replace(r) => match rib.kind_of(r.prefix) {
                None | Some(RouteKind::Linux(_)) => {
                    let p = r.prefix;
                    match rib.replace(r) {
                        Ok(()) => n.installed += 1,
                        Err(e) => {
                            n.refused += 1;
                            tracing::warn!(prefix = %p, error = %e, refused = n.refused, "linux mirror: route refused");
                        }
                    }
                }
                Some(_) => n.shadowed += 1,
            },
            Change::Delete(p) => {
                if let Some(RouteKind::Linux(_)) = rib.kind_of(p) {
                    if rib.delete(p).is_ok() {
                        n.deleted += 1;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_route::{FibConfig, NextHop, Route};

    #[test]
    fn mirrored_routes_never_displace_others() {
        let (mut rib, _fib) = Rib::new(FibConfig::default());
        let p = |s: &str| s.parse().unwrap();
        let via = |g: &str| vec![NextHop::via(g.parse().unwrap(), 0)];
        rib.add(Route::new(p("10.1.0.0/16"), via("192.0.2.1"))).unwrap();
        let linux = |s: &str, g: &str| {
            let mut r = Route::new(p(s), via(g));
            r.kind = RouteKind::Linux(12);
            r
        };
        let mut n = Applied::default();
        apply(
            &mut rib,
            vec![
                Change::Replace(linux("10.1.0.0/16", "192.0.2.9")),
                Change::Replace(linux("10.2.0.0/16", "192.0.2.9")),
                Change::Replace(linux("10.2.0.0/16", "192.0.2.8")),
                Change::Delete(p("10.1.0.0/16")),
            ],
            &mut n,
        );
        assert_eq!(
            n,
            Applied {
                installed: 2,
                deleted: 0,
                shadowed: 1,
                refused: 0
            }
        );
        assert_eq!(rib.get(p("10.1.0.0/16")).unwrap().kind, RouteKind::Static);
        assert_eq!(rib.get(p("10.2.0.0/16")).unwrap().hops, via("192.0.2.8"));
        apply(&mut rib, vec![Change::Delete(p("10.2.0.0/16"))], &mut n);
        assert_eq!(n.deleted, 1);
        assert!(rib.get(p("10.2.0.0/16")).is_none());
    }
}
