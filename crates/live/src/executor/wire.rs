//! The wire between the parent and the child: the spec ([`ExecSpec`], the workload's own
//! operations with their resolved addresses) as one JSON document on the child's stdin, with
//! serde. Written once here; the round trip is tested below.

use super::spec::ExecSpec;

/// The spec as the parent writes it.
pub fn encode(spec: &ExecSpec) -> Result<String, String> {
    serde_json::to_string(spec).map_err(|e| format!("spec: {e}"))
}

/// The spec as the child reads it.
pub fn decode(text: &str) -> Result<ExecSpec, String> {
    serde_json::from_str(text).map_err(|e| format!("bad spec on stdin: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::spec::build_spec;

    /// Every statement of the language, through the wire and back, unchanged.
    #[test]
    fn every_statement_round_trips() {
        let w = workload::parse(
            "t",
            "tmpfs t huge=within_size\nshm_open s on=t\nfile f on=t\nmemfd m\nftruncate m 4M\n\
             fallocate s[0+2M] keep\nwrite f[0+1M] chunk=64K\nmmap a 4M file=m pgoff=2M at=0x7e0000000000\n\
             mmap b 8M align=2M offset=4K prot=rw\nmprotect b[0+4K] r\nmadvise b hugepage\nbrk +10K\n\
             touch heap write\ntouch b[4K..] write stride=8K order=random seed=3 count=5 rate=1M/s\n\
             access b zipf s=1.2 count=100 writes=30 seed=9 elem=64\nread_direct b[0+1M] block=64K\n\
             prctl thp_disable except_advised\nphase one\nrepeat 1ms {\nsleep 1ms\n}\nmunmap b[0+4K] every=64K\n\
             fork c {\ntouch a read\nexit\n}\nwait c\nthread th {\ntouch b[0+4K] write\nexit\n}\nwait th\n\
             vfork v {\ntouch b[0+8K] write\nexit\n}\nwait v\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let (spec, _, _) = build_spec(&w, &[]).unwrap();
        assert_eq!(spec.ops.len(), w.ops.len());
        let text = encode(&spec).unwrap();
        assert_eq!(decode(&text).unwrap(), spec);
        for (sent, parsed) in spec.ops.iter().zip(&w.ops) {
            assert_eq!(sent.op, parsed.kind, "line {}", parsed.line);
        }
        assert!(decode("{\"source\":1}").unwrap_err().starts_with("bad spec on stdin: "));
    }
}
