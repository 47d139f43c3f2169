//! The host behind a virtual machine, as the guest sees it: whether a balloon device reports
//! free pages (mm/page_reporting.c registers it and sets `page_reporting_order`, which stays
//! -1 without one), and the free lists that decide which frames the next allocations take: a
//! program's pages are movable allocations (GFP_HIGHUSER_MOVABLE), and `__rmqueue_smallest`
//! (mm/page_alloc.c) searches only the free lists of the request's migratetype, smallest order
//! first, so the Movable lists of /proc/pagetypeinfo decide, not every list of /proc/buddyinfo.
//! The model's `mm::page_reporting` and the profile's `[host]` use them.

use std::io;

const PARAMS: &str = "/sys/module/page_reporting/parameters";

/// `page_reporting_order` when a reporting device is registered (a value of 0..=10), else None.
pub fn reporting_order() -> Option<u8> {
    let text = std::fs::read_to_string(format!("{PARAMS}/page_reporting_order")).ok()?;
    text.trim().parse::<u8>().ok().filter(|&o| o <= mm_types::MAX_PAGE_ORDER)
}

/// KiB reported to the host since boot, on kernels that count it (this machine kind's build has
/// a `reported_kib` parameter; upstream 6.18 has none).
pub fn reported_kib() -> Option<u64> {
    std::fs::read_to_string(format!("{PARAMS}/reported_kib")).ok()?.trim().parse().ok()
}

/// Wait until page reporting has nothing left to report: `reported_kib` has not grown for
/// longer than two passes (PAGE_REPORTING_DELAY is 2 s), for at most 60 s; `progress` hears the
/// seconds waited. Then every free block of the reporting order and above is reported, the
/// state of a machine that idled, which is where the model's machine starts. None (and no wait)
/// where the kernel does not count reported memory.
pub fn wait_until_settled(progress: &mut impl FnMut(u64)) -> Option<std::time::Duration> {
    use std::time::{Duration, Instant};
    let start = Instant::now();
    let mut last = reported_kib()?;
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(4500) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(250));
        progress(start.elapsed().as_secs());
        let now = reported_kib().unwrap_or(last);
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    Some(start.elapsed())
}

/// The free blocks a program's pages come from, per order (0..=10), every zone together: the
/// Movable rows of /proc/pagetypeinfo (readable by root), else every row of /proc/buddyinfo.
/// The other migratetypes' blocks (unmovable, reclaimable) are used by a movable allocation only
/// once its own lists are empty of every order (`__rmqueue` falls back then): on this machine
/// kind after a test suite, 46 696 of the 191 877 free frames in blocks below the reporting
/// order were theirs, and a 1 GiB run of 4 KiB faults took 116 404 reported frames where the
/// buddyinfo rows predicted about 36 000.
pub fn free_areas() -> io::Result<Vec<u64>> {
    match std::fs::read_to_string("/proc/pagetypeinfo") {
        Ok(text) => parse_pagetypeinfo(&text, "Movable").map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("/proc/pagetypeinfo: {e}"))),
        Err(_) => {
            let text = std::fs::read_to_string("/proc/buddyinfo")?;
            parse_buddyinfo(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("/proc/buddyinfo: {e}")))
        }
    }
}

/// Sums the free-list rows of one migratetype in a /proc/pagetypeinfo text
/// (`Node    0, zone   Normal, type      Movable   1006    973 ...`), every zone together.
pub fn parse_pagetypeinfo(text: &str, migratetype: &str) -> Result<Vec<u64>, String> {
    let rows: String = text
        .lines()
        .filter_map(|l| {
            let (zone, rest) = l.split_once(", type")?;
            let mut words = rest.split_whitespace();
            (words.next() == Some(migratetype)).then(|| format!("{zone} {}\n", words.collect::<Vec<_>>().join(" ")))
        })
        .collect();
    if rows.is_empty() {
        return Err(format!("no free-list row of type {migratetype}"));
    }
    parse_buddyinfo(&rows)
}

/// Sums the rows of a /proc/buddyinfo text (`Node 0, zone Normal 52888 41105 ...`).
pub fn parse_buddyinfo(text: &str) -> Result<Vec<u64>, String> {
    let mut total = vec![0u64; mm_types::MAX_PAGE_ORDER as usize + 1];
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let counts = line.split_once("zone").map(|(_, rest)| rest.split_whitespace().skip(1));
        let Some(counts) = counts else { return Err(format!("line {}: no 'zone' in {line:?}", i + 1)) };
        for (o, c) in counts.enumerate() {
            let n: u64 = c.parse().map_err(|_| format!("line {}: {c:?} is not a count", i + 1))?;
            if o >= total.len() {
                return Err(format!("line {}: more than {} orders", i + 1, total.len()));
            }
            total[o] += n;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buddyinfo_rows_are_summed_per_order() {
        let text = "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 \n\
                    Node 0, zone    DMA32     88     62     75     51     52     43     40     33     17     21    730 \n\
                    Node 0, zone   Normal  52888  41105  31687  18383   8340   3902   1978   1215    786    485   2412 \n";
        assert_eq!(parse_buddyinfo(text).unwrap(), vec![52976, 41167, 31762, 18434, 8392, 3945, 2018, 1248, 804, 507, 3145]);
        assert!(parse_buddyinfo("Node 0, zone Normal 1 x\n").unwrap_err().contains("line 1"));
    }

    #[test]
    fn pagetypeinfo_sums_one_migratetype_over_the_zones() {
        // This machine's rows (trimmed to two zones and three types).
        let text = "Page block order: 9\nPages per block:  512\n\n\
                    Free pages count per migrate type at order       0      1      2      3      4      5      6      7      8      9     10 \n\
                    Node    0, zone    DMA32, type    Unmovable      0      0      0      0      0      0      0      0      0      0      0 \n\
                    Node    0, zone    DMA32, type      Movable      1      1      4      2      5      4      3      3      4      2    752 \n\
                    Node    0, zone   Normal, type    Unmovable    224    800    728    526    315    167     92     38     20      0      0 \n\
                    Node    0, zone   Normal, type      Movable   1006    973    757    820   1274    850    478    339    222    139    518 \n\
                    Node    0, zone   Normal, type  Reclaimable   1241    517    259    148     50      9      3      1      2      0      0 \n\n\
                    Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic      Isolate \n\
                    Node 0, zone    DMA32            0         1528            0            0            0 \n";
        assert_eq!(parse_pagetypeinfo(text, "Movable").unwrap(), vec![1007, 974, 761, 822, 1279, 854, 481, 342, 226, 141, 1270]);
        assert_eq!(parse_pagetypeinfo(text, "Reclaimable").unwrap(), vec![1241, 517, 259, 148, 50, 9, 3, 1, 2, 0, 0]);
        assert!(parse_pagetypeinfo(text, "Isolate").unwrap_err().contains("Isolate"));
    }
}
