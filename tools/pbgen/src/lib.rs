//! What pbgen's two generators share: walking a crate's sources, and reading the string
//! constants of a trait impl (`API_VERSION`, `KIND`, ...).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Every `.rs` file under `dir`, appended to `out`, sorted.
pub fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            rs_files(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    Ok(())
}

/// The string-literal constants of an impl, by name.
pub fn str_consts(i: &syn::ItemImpl) -> BTreeMap<String, String> {
    i.items
        .iter()
        .filter_map(|it| match it {
            syn::ImplItem::Const(c) => match &c.expr {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some((c.ident.to_string(), s.value())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}
