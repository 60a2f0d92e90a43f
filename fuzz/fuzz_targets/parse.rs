//! `domain::decode` + `domain::Domain::parse` on arbitrary bytes: never a panic, and every fact
//! the rest of the tool reads from a parsed domain can be read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use virt_cpu_policy::domain::Domain;
use virt_cpu_policy::xml::decode;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = decode(data, "fuzz") else {
        return;
    };
    let Ok(dom) = Domain::parse(text, "fuzz") else {
        return;
    };
    let _ = (
        dom.virt_type(),
        dom.name(),
        dom.arch(),
        dom.machine(),
        dom.emulator(),
    );
    for cpu in dom.cpus() {
        // Every node's range indexes the original text on char boundaries.
        let r = cpu.range();
        assert!(
            text.get(r.clone()).is_some(),
            "<cpu> range {r:?} not on char boundaries"
        );
        assert!(text[r].starts_with("<"));
    }
    let _ = dom.in_scope();
});
