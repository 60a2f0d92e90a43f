//! `fleet --format html`: the page is one self-contained file whatever the facts hold (a guest
//! named to break out of the page's script is text in it), and states what it was made from.
//! The numbers it shows are checked in a real browser by tests/html/run.

use super::{GENERATIONS, custom, guest, guest_facts, hosts_dir, run_fleet};
use crate::harness::{Scratch, s};
use serde_json::Value;

/// The page's JSON data, as the browser's `JSON.parse` reads it.
fn page_data(page: &str) -> Value {
    serde_json::from_str(&page_data_text(page)).expect("the data is JSON")
}

/// A guest named `</script><img src=x onerror=alert(1)>` (as a libvirt name may be) is data in
/// the page, not markup: the page has its two scripts only, the name comes back whole from the
/// data, nothing is fetched (no URL outside the data; a Content-Security-Policy that allows no
/// source), and the page names its inputs.
#[test]
fn the_page_is_self_contained_and_a_hostile_name_stays_text() {
    let t = Scratch::new("fleet-page");
    let hosts = hosts_dir(&t, "hosts", &GENERATIONS);
    let hostile = "</script><img src=x onerror=alert(1)>";
    let escaped = "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;";
    let doc = guest(escaped, "pc-q35-5.2", &custom("qemu64", ""));
    t.write(
        "trixie.guests.xml",
        guest_facts("trixie", &[(escaped, "shutoff", doc)]),
    );
    let facts = s(&t.path("trixie.guests.xml"));
    let out = run_fleet(&["--format".into(), "html".into(), s(&hosts), facts.clone()]);
    out.status(0);
    let page = &out.stdout;
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert_eq!(page.matches("<script").count(), 2, "{page}");
    assert!(!page.contains(hostile));
    assert!(page.contains(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'\">"
    ));
    let data = page_data(page);
    assert_eq!(data["guests"][0]["n"], hostile);
    assert_eq!(data["hosts"].as_array().unwrap().len(), GENERATIONS.len());
    let inputs: Vec<&str> = data["made"]["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        inputs.contains(&s(&hosts).as_str()) && inputs.contains(&facts.as_str()),
        "{inputs:?}"
    );
    assert!(
        inputs.iter().any(|i| i.starts_with("--cpu-map forky=")),
        "{inputs:?}"
    );
    let at = data["made"]["at"].as_str().unwrap();
    assert!(
        at.len() == 20 && at.ends_with('Z') && at.as_bytes()[10] == b'T',
        "{at}"
    );
    let outside = page.replace(&page_data_text(page), "");
    for fetch in ["http:", "https:", "url(", "@import", " src=", "<link"] {
        assert!(!outside.contains(fetch), "{fetch}: {outside}");
    }
    for href in outside.split("href=\"").skip(1) {
        assert!(href.starts_with('#'), "a link out of the page: {href}");
    }
}

/// The data element's text as written.
fn page_data_text(page: &str) -> String {
    let open = "<script type=\"application/json\" id=\"data\">";
    let start = page.find(open).unwrap() + open.len();
    let end = start + page[start..].find("</script>").unwrap();
    page[start..end].to_string()
}

/// The page is the whole fleet: a view of one part of it is bad usage, exit 2, one line, no page.
#[test]
fn the_page_with_a_view_of_one_part_is_exit_2() {
    let t = Scratch::new("fleet-page-usage");
    let hosts = hosts_dir(&t, "hosts", &GENERATIONS);
    for view in [["--drain", "trixie"], ["--guest", "web-1"]] {
        let out = run_fleet(&[
            "--format".into(),
            "html".into(),
            view[0].into(),
            view[1].into(),
            s(&hosts),
        ]);
        out.status(2);
        assert_eq!(out.stdout, "");
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(
            out.stderr.contains("--format html is the whole fleet"),
            "{}",
            out.stderr
        );
    }
}
