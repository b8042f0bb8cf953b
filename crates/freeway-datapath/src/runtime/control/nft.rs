//! The firewall's control requests: `firewall list`, `firewall load FILE`, `set add|del`.
//!
//! Every change builds a whole new ruleset (the current one with the change applied, or the
//! file's) and publishes it only if it parses and compiles; otherwise nothing changes and the
//! error names the line and column. A set change is a new ruleset too: sets are compiled
//! into the classifier, and one replacement path keeps "a packet meets one whole ruleset"
//! true for every change.

use std::io::Read;
use std::path::Path;

use freeway_firewall::ast::{Elem, Ruleset, ValueType};
use serde_json::json;

use super::protocol::{CtlError, Reply};
use crate::runtime::firewall::FirewallShared;

/// Largest ruleset file `firewall load` reads.
pub(crate) const MAX_RULESET_FILE: u64 = 16 << 20;

/// `firewall list`: the ruleset as `nft list ruleset` prints it, with its counters; `-j` as
/// `nft -j list ruleset`.
pub(crate) fn list(fw: &FirewallShared) -> Result<Reply, CtlError> {
    let cur = fw.current();
    let counters = |t: usize, c: usize, r: usize| cur.counters(t, c, r);
    let text = freeway_firewall::list(cur.ruleset(), &counters);
    let data = freeway_firewall::list_json(cur.ruleset(), &counters);
    Ok(Reply::new(text, data))
}

/// `firewall load FILE`.
pub(crate) fn load(fw: &FirewallShared, path: &Path) -> Result<Reply, CtlError> {
    let text = read_bounded(path)?;
    let rs = freeway_firewall::parse(&text).map_err(|e| CtlError::Invalid(format!("{}:{e}", path.display())))?;
    let (tables, rules) = size(&rs);
    fw.replace(rs, &path.display().to_string())
        .map_err(|e| CtlError::Invalid(format!("{}:{e}", path.display())))?;
    Ok(Reply::new(
        format!("loaded {} ({tables} tables, {rules} rules)\n", path.display()),
        json!({"loaded": path, "tables": tables, "rules": rules}),
    ))
}

/// `set add|del SET ELEMENTS`.
pub(crate) fn set_change(fw: &FirewallShared, set: &str, elements: &str, add: bool) -> Result<Reply, CtlError> {
    let mut rs = fw.current().ruleset().clone();
    let (table, name) = match set.split_once('/') {
        Some((t, n)) => (Some(t), n),
        None => (None, set),
    };
    let found: Vec<(usize, usize)> = rs
        .tables
        .iter()
        .enumerate()
        .filter(|(_, t)| table.is_none_or(|n| t.name == n))
        .flat_map(|(ti, t)| {
            t.sets
                .iter()
                .enumerate()
                .filter(|(_, s)| s.name == name)
                .map(move |(si, _)| (ti, si))
        })
        .collect();
    let (ti, si) = match found.as_slice() {
        [one] => *one,
        [] => return Err(CtlError::NotFound(format!("no set named {set:?} in the ruleset"))),
        _ => {
            return Err(CtlError::Invalid(format!(
                "several tables have a set named {name:?}: name it as TABLE/{name}"
            )))
        }
    };
    let decl = &rs.tables[ti].sets[si];
    let elems = parse_elements(&decl.key, decl.interval, elements)?;
    let decl = &mut rs.tables[ti].sets[si];
    let mut changed = 0usize;
    for e in elems {
        let at = decl.elements.iter().position(|x| *x == e);
        match (add, at) {
            (true, None) => {
                decl.elements.push(e);
                changed += 1;
            }
            (false, Some(i)) => {
                decl.elements.remove(i);
                changed += 1;
            }
            (true, Some(_)) => {}
            (false, None) => {
                return Err(CtlError::NotFound(format!(
                    "set {set:?} has no element {}: nothing deleted",
                    elements.trim()
                )))
            }
        }
    }
    let source = fw.source();
    fw.replace(rs, &source).map_err(CtlError::Invalid)?;
    let verb = if add { "added" } else { "deleted" };
    Ok(Reply::new(
        format!("{changed} elements {verb}\n"),
        json!({ verb: changed, "set": set }),
    ))
}

/// Elements written in nftables syntax, read with the set's key type: by the ruleset parser
/// itself, as the elements of a one-set ruleset, so they mean exactly what they would mean
/// in a file.
fn parse_elements(key: &[ValueType], interval: bool, text: &str) -> Result<Vec<Elem>, CtlError> {
    if key.iter().any(|t| matches!(t, ValueType::Integer { .. })) {
        return Err(CtlError::Invalid("this set's key type cannot be changed live".into()));
    }
    let types: Vec<&str> = key
        .iter()
        .map(|&t| freeway_firewall::parse::names::type_name(t))
        .collect();
    if text.contains(['{', '}', ';', '\n', '#']) {
        return Err(CtlError::Invalid(format!(
            "elements: {text:?}: write them as `a, b, c` (one pair of braces around all of them at most)"
        )));
    }
    let flags = if interval { "flags interval\n" } else { "" };
    let src = format!(
        "table inet x {{\nset s {{\ntype {}\n{flags}elements = {{ {text} }}\n}}\n}}\n",
        types.join(" . ")
    );
    let rs = freeway_firewall::parse(&src).map_err(|e| CtlError::Invalid(format!("elements {text:?}: {}", e.msg)))?;
    let elems = rs
        .tables
        .into_iter()
        .next()
        .and_then(|t| t.sets.into_iter().next())
        .map(|s| s.elements)
        .unwrap_or_default();
    if elems.is_empty() {
        return Err(CtlError::Usage("no elements given".into()));
    }
    Ok(elems)
}

/// Tables and rules of a ruleset.
fn size(rs: &Ruleset) -> (usize, usize) {
    let rules = rs.tables.iter().flat_map(|t| &t.chains).map(|c| c.rules.len()).sum();
    (rs.tables.len(), rules)
}

/// Reads a ruleset file of at most [`MAX_RULESET_FILE`] bytes.
fn read_bounded(path: &Path) -> Result<String, CtlError> {
    let f = std::fs::File::open(path).map_err(|e| CtlError::NotFound(format!("{}: {e}", path.display())))?;
    let mut text = String::new();
    f.take(MAX_RULESET_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| CtlError::Invalid(format!("{}: {e}", path.display())))?;
    if text.len() as u64 > MAX_RULESET_FILE {
        return Err(CtlError::Invalid(format!(
            "{}: larger than {MAX_RULESET_FILE} bytes",
            path.display()
        )));
    }
    Ok(text)
}
