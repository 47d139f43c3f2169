//! The hugetlb statements: `hugetlb_pool SIZE N [overcommit=N]`, `mmap NAME SIZE
//! hugetlb[=2M|1G] [shared] [noreserve]` (MAP_HUGETLB) and `memfd NAME hugetlb[=2M|1G]`
//! (MFD_HUGETLB). Kernel rules they check: mm/mmap.c `ksys_mmap_pgoff` (a MAP_HUGETLB length is
//! rounded up to the huge page size), `hugetlb_get_unmapped_area` (addresses aligned to it).

use super::*;

const POOL_USAGE: &str = "hugetlb_pool 2M|1G N [overcommit=N]";
const MEMFD_USAGE: &str = "memfd NAME [hugetlb[=2M|1G]]";

/// The page size of a `hugetlb` or `hugetlb=SIZE` word, if `a` is one.
fn hugetlb_word(cx: &Ctx, a: &str) -> Result<Option<HugePage>, WorkloadError> {
    match a.strip_prefix("hugetlb") {
        Some("") => Ok(Some(HugePage::Size2M)),
        Some(rest) => match rest.strip_prefix('=') {
            Some(v) => HugePage::parse(v)
                .map(Some)
                .ok_or_else(|| cx.err(format!("invalid hugetlb page size '{v}'; valid: {} (x86-64's hugetlb sizes)", HugePage::WORDS.join(", ")))),
            None => Ok(None),
        },
        None => Ok(None),
    }
}

fn count(cx: &Ctx, what: &str, text: &str) -> Result<u64, WorkloadError> {
    text.parse::<u64>().map_err(|_| cx.err(format!("{what} must be a whole number of pages, not '{text}'")))
}

/// `hugetlb_pool SIZE N [overcommit=N]`, before every operation.
pub(super) fn parse_pool(cx: &Ctx, w: &mut Workload, args: &[&str]) -> Result<(), WorkloadError> {
    if !w.ops.is_empty() {
        return Err(cx.err("hugetlb_pool sets the machine's pool for the whole run: put it before the first operation"));
    }
    let (pos, opts) = split_options(cx, args, &["overcommit"])?;
    expect_positional(cx, POOL_USAGE, &pos, 2)?;
    let page = HugePage::parse(pos[0]).ok_or_else(|| cx.err(format!("invalid hugetlb page size '{}'; valid: {}", pos[0], HugePage::WORDS.join(", "))))?;
    if let Some(p) = w.hugetlb_pools.iter().find(|p| p.page == page) {
        return Err(cx.err(format!("the {} pool is already set at line {}", page.word(), p.line)));
    }
    let pages = count(cx, "the pool's size", pos[1])?;
    let overcommit = opt(&opts, "overcommit").map(|o| count(cx, "overcommit=", o)).transpose()?;
    if overcommit.is_some() && page == HugePage::Size1G {
        return Err(cx.err("overcommit= is for 2M pages only (1G pages are gigantic: the kernel makes no surplus ones)"));
    }
    // A pool larger than any machine thplab models (4 TiB) is a typo.
    if pages.saturating_mul(page.bytes()) > 4 << 40 {
        return Err(cx.err(format!("a pool of {pages} {} pages is more than 4T", page.word())));
    }
    w.hugetlb_pools.push(HugetlbPool { page, pages, overcommit, line: cx.line });
    Ok(())
}

/// `mmap NAME SIZE hugetlb[=SIZE] [shared] [noreserve] [prot=] [align=] [at=]`; None when
/// the statement has no `hugetlb` word (an ordinary mmap).
pub(super) fn parse_mmap(cx: &Ctx, w: &mut Workload, args: &[&str], usage: &str) -> Result<Option<OpKind>, WorkloadError> {
    let mut page = None;
    for a in args {
        if let Some(p) = hugetlb_word(cx, a)? {
            page = Some(p);
        }
    }
    let Some(page) = page else { return Ok(None) };
    let rest: Vec<&str> = args.iter().copied().filter(|a| !a.starts_with("hugetlb")).collect();
    let (mut pos, opts) = split_options(cx, &rest, &["prot", "align", "at"])
        .map_err(|e| WorkloadError { message: format!("{} (a hugetlb mapping takes prot=, align=, at=; to map a hugetlb memfd write file=FILE)", e.message), ..e })?;
    let (mut shared, mut noreserve) = (false, false);
    while pos.len() > 2 {
        match pos.pop().unwrap_or_default() {
            "shared" if !shared => shared = true,
            "noreserve" if !noreserve => noreserve = true,
            other => return Err(cx.err(format!("unexpected '{other}' in a hugetlb mmap; expected: {usage}"))),
        }
    }
    expect_positional(cx, usage, &pos, 2)?;
    let name = new_name(cx, pos[0])?;
    let len = size_sum(cx, pos[1])?;
    if len == 0 {
        return Err(cx.err("mmap of 0 bytes: the kernel returns EINVAL"));
    }
    // ksys_mmap_pgoff: ALIGN(len, huge_page_size).
    let len = len.div_ceil(page.bytes()) * page.bytes();
    let prot = match opt(&opts, "prot") {
        Some(p) => Prot::parse(p).ok_or_else(|| cx.err(format!("invalid protection '{p}'; valid: {PROT_VALID}")))?,
        None => Prot::RW,
    };
    let placement = match (opt(&opts, "align"), opt(&opts, "at")) {
        (None, None) => Placement::Kernel,
        (Some(_), Some(_)) => return Err(cx.err("at= fixes the address; it cannot be combined with align=")),
        (Some(a), None) => {
            let align = size(cx, a)?;
            if !align.is_power_of_two() || align < page.bytes() {
                return Err(cx.err(format!("align= must be a power of two of at least the huge page size ({})", page.word())));
            }
            Placement::Aligned { align, offset: 0 }
        }
        (None, Some(at)) => {
            let addr = parse_addr(at).ok_or_else(|| cx.err(format!("invalid address '{at}'; write it in hex: 0x7e0000000000")))?;
            if addr % page.bytes() != 0 {
                return Err(cx.err(format!("address {at} is not aligned to the huge page size ({}): the kernel returns EINVAL", page.word())));
            }
            Placement::Fixed(addr)
        }
    };
    let id = RegionId(w.regions.len() as u32);
    w.regions.push(RegionDecl { name, len, line: cx.line });
    Ok(Some(OpKind::Mmap { region: id, len, prot, placement, backing: Backing::Hugetlb { page, shared, noreserve } }))
}

/// `memfd NAME hugetlb[=SIZE]`; None without the `hugetlb` word.
pub(super) fn parse_memfd(cx: &Ctx, w: &mut Workload, args: &[&str]) -> Result<Option<OpKind>, WorkloadError> {
    let [name, word] = args else { return Ok(None) };
    let Some(page) = hugetlb_word(cx, word)? else {
        return Err(cx.err(format!("unexpected '{word}'; expected: {MEMFD_USAGE}")));
    };
    let name = new_name(cx, name)?;
    w.files.push(FileDecl { name, kind: FileKind::HugetlbMemfd { page }, line: cx.line });
    Ok(Some(OpKind::Create(FileId(w.files.len() as u32 - 1))))
}

#[cfg(test)]
mod tests {
    use crate::{parse, Backing, FileKind, HugePage, OpKind};

    #[test]
    fn hugetlb_statements_parse() {
        let w = parse("t", "hugetlb_pool 2M 4 overcommit=2\nmmap a 3M hugetlb shared\nmmap b 1G hugetlb=1G noreserve\nmemfd f hugetlb\n").unwrap();
        assert_eq!(w.hugetlb_pools.len(), 1);
        assert_eq!((w.hugetlb_pools[0].pages, w.hugetlb_pools[0].overcommit), (4, Some(2)));
        assert_eq!(w.regions[0].len, 4 << 20, "3M rounded up to 2M pages");
        let OpKind::Mmap { backing, .. } = w.ops[0].kind else { panic!() };
        assert_eq!(backing, Backing::Hugetlb { page: HugePage::Size2M, shared: true, noreserve: false });
        let OpKind::Mmap { backing, .. } = w.ops[1].kind else { panic!() };
        assert_eq!(backing, Backing::Hugetlb { page: HugePage::Size1G, shared: false, noreserve: true });
        assert_eq!(w.files[0].kind, FileKind::HugetlbMemfd { page: HugePage::Size2M });
        assert!(w.uses_hugetlb());
        assert!(!parse("t", "mmap a 4M\n").unwrap().uses_hugetlb());
    }

    #[test]
    fn hugetlb_errors_say_what_is_valid() {
        let err = |t: &str| parse("w.thpw", t).unwrap_err().to_string();
        assert!(err("mmap a 4M\nhugetlb_pool 2M 1\n").contains("before the first operation"));
        assert!(err("mmap a 4M hugetlb=4M\n").contains("valid: 2M, 1G"));
        assert!(err("mmap a 4M hugetlb at=0x7e0000001000\n").contains("not aligned"));
        assert!(err("mmap a 4M hugetlb pgoff=0\n").contains("valid options here: prot, align, at"));
        assert!(err("hugetlb_pool 1G 1 overcommit=1\n").contains("2M pages only"));
        assert!(err("hugetlb_pool 2M 1\nhugetlb_pool 2M 2\n").contains("already set at line 1"));
        assert!(err("memfd f huge\n").contains("memfd NAME [hugetlb"));
    }
}
