//! The explorer page's own state, natively: the address it keeps (view, filters, options, the device's peaks) and
//! the bundle index it fetches. (The charts it shows are tested in charts/tests.)

use charts::views::{Filters, Options, ParetoX, ViewKind};
use explorer::index::{default_entry, is_plain_file_name, option_label, parse_index};
use explorer::state::{PageState, parse_peak};
use metrics::derive::MemoryMetric;

#[test]
fn page_state_round_trips_through_the_url() {
    let s = PageState {
        bundle: Some("a b.json".into()),
        compare: Some("c.json".into()),
        view: ViewKind::Memory,
        filters: Filters {
            model: Some("GSAI-ML/LLaDA-8B".into()),
            steps: Some(64),
            batch: Some(4),
            seq: Some(256),
            sampler: Some("llada_random".into()),
            precision: Some("bf16".into()),
        },
        options: Options {
            log_x: true,
            log_y: true,
            memory: MemoryMetric::Reserved,
            bytes: true,
            throughput_lines: true,
            metric: Some("perplexity".into()),
            peak_bw_tbs: Some(4.8),
            peak_tflops: Some(989.5),
            pareto_x: ParetoX::TokensPerForward,
            multiples: true,
            energy: true,
        },
    };
    let q = s.to_query();
    assert!(q.starts_with("?bundle=a%20b.json&compare=c.json&view=memory&model=GSAI-ML%2FLLaDA-8B"), "{q}");
    let pairs: Vec<(String, String)> = q[1..]
        .split('&')
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("k=v");
            (k.to_string(), v.replace("%20", " ").replace("%2F", "/"))
        })
        .collect();
    assert_eq!(PageState::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))), s);
    // The page reads every key it writes (a reload restores the whole state).
    for (k, _) in &pairs {
        assert!(explorer::state::KEYS.contains(&k.as_str()), "the page does not read {k}");
    }
    assert_eq!(PageState::default().to_query(), "");
    let junk = PageState::from_pairs([("view", "nope"), ("K", "x"), ("mem", "??")]);
    assert_eq!(junk, PageState::default(), "a bad link never breaks the page");
}

#[test]
fn the_page_opens_on_the_answer() {
    assert_eq!(PageState::default().view, ViewKind::Answer);
}

#[test]
fn the_peaks_live_in_the_deep_link() {
    let o = Options { peak_bw_tbs: Some(0.01), peak_tflops: Some(0.02), ..Options::default() };
    let s = PageState { view: ViewKind::Roofline, options: o.clone(), ..PageState::default() };
    let q = s.to_query();
    assert!(q.contains("view=roofline") && q.contains("peak_bw=0.01") && q.contains("peak_flops=0.02"), "{q}");
    let pairs: Vec<(&str, &str)> = q[1..].split('&').filter_map(|p| p.split_once('=')).collect();
    assert_eq!(PageState::from_pairs(pairs), s);
    assert_eq!(parse_peak("-1"), None);
    assert_eq!(parse_peak("NaN"), None);
}

#[test]
fn index_keeps_only_plain_file_names() {
    let idx = r#"{"bundles": [
        {"file": "demo-20261121T151700Z.json", "title": "demo on H200", "created_at": "2026-11-21T15:17:00Z", "synthetic_weights": true},
        {"file": "../secret.json", "title": "x", "created_at": "", "synthetic_weights": false},
        {"file": "https://evil.example/a.json", "title": "x", "created_at": "", "synthetic_weights": false}
    ]}"#;
    let entries = parse_index(idx).expect("index");
    assert_eq!(entries.len(), 1);
    assert_eq!(option_label(&entries[0], &entries), "demo on H200 (2026-11-21T15:17:00Z) [synthetic weights]");
    assert!(parse_index("{}").unwrap_err().contains("index.json"));
    for bad in ["", ".hidden", "a/b.json", "a\\b.json", "%2e%2e", "a?b", "x#y"] {
        assert!(!is_plain_file_name(bad), "{bad:?}");
    }
}

#[test]
fn bundles_of_one_title_are_told_apart_by_file_name() {
    // Two runs of one config on one device: the same title; a closed selector shows about 45 characters of it.
    let idx = r#"{"bundles": [
        {"file": "gpu-runner.json", "title": "gpu_primary on NVIDIA H200", "created_at": "2026-11-26T06:02:57Z", "synthetic_weights": false},
        {"file": "gpu-again.json", "title": "gpu_primary on NVIDIA H200", "created_at": "2026-11-26T06:10:53Z", "synthetic_weights": false},
        {"file": "cpu.json", "title": "demo on AMD EPYC", "created_at": "", "synthetic_weights": false}
    ]}"#;
    let entries = parse_index(idx).expect("index");
    let labels: Vec<String> = entries.iter().map(|e| option_label(e, &entries)).collect();
    assert_eq!(
        labels,
        [
            "gpu_primary on NVIDIA H200: gpu-runner.json (2026-11-26T06:02:57Z)",
            "gpu_primary on NVIDIA H200: gpu-again.json (2026-11-26T06:10:53Z)",
            "demo on AMD EPYC",
        ]
    );
}

#[test]
fn a_partial_bundle_is_marked_and_not_opened_by_default() {
    // An interrupted run's partial bundle is the newest; the page opens the newest whole one and marks the other.
    let idx = r#"{"bundles": [
        {"file": "partial.json", "title": "demo on CPU", "created_at": "2026-11-28T04:30:00Z", "synthetic_weights": true, "partial": true},
        {"file": "whole.json", "title": "demo on CPU", "created_at": "2026-11-28T04:24:00Z", "synthetic_weights": true}
    ]}"#;
    let entries = parse_index(idx).expect("index");
    assert!(entries[0].partial && !entries[1].partial, "`partial` absent reads as false");
    assert!(option_label(&entries[0], &entries).ends_with(" [synthetic weights] [PARTIAL]"));
    assert!(!option_label(&entries[1], &entries).contains("PARTIAL"));
    assert_eq!(default_entry(&entries).map(|e| e.file.as_str()), Some("whole.json"));
    // Every bundle partial: the newest still opens.
    assert_eq!(default_entry(&entries[..1]).map(|e| e.file.as_str()), Some("partial.json"));
    assert_eq!(default_entry(&[]), None);
    // A reference implementation's bundle (written after the runner's, to compare with it) is not opened first.
    let idx = r#"{"bundles": [
        {"file": "hf.json", "title": "gpu_primary by hf-transformers-reference on H200", "created_at": "2026-11-26T06:10:00Z", "synthetic_weights": true, "reference": true},
        {"file": "runner.json", "title": "gpu_primary on H200", "created_at": "2026-11-26T06:02:00Z", "synthetic_weights": true}
    ]}"#;
    let entries = parse_index(idx).expect("index");
    assert_eq!(default_entry(&entries).map(|e| e.file.as_str()), Some("runner.json"));
    assert_eq!(default_entry(&entries[..1]).map(|e| e.file.as_str()), Some("hf.json"), "the only one still opens");
}
