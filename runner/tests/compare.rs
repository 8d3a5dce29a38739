//! `dllm-bench compare`: two bundles of a tiny demo run, one of them with a token or a figure changed.

use crate::assert_exit;
use crate::util::{Sandbox, stderr, stdout};

/// A demo run with quality (continuations kept): 2 prompts, one repetition, K = 8, B = 1, N = 48.
fn demo(sb: &Sandbox) -> serde_json::Value {
    let out = sb.cmd(&[
        "run",
        "--quiet",
        "--max-prompts",
        "2",
        "--repetitions",
        "1",
        "--warmup",
        "0",
        "--steps",
        "8",
        "--batch-size",
        "1",
        "--seq-len",
        "48",
        "--run-dir",
        sb.path().join("run").to_str().expect("utf8"),
    ]);
    assert_exit!(out, 0);
    let text = std::fs::read_to_string(sb.path().join("run/bundle.json")).expect("bundle");
    serde_json::from_str(&text).expect("json")
}

#[test]
fn compare_names_each_difference_and_exits_1() {
    let sb = Sandbox::new();
    let a = demo(&sb);
    let write = |name: &str, v: &serde_json::Value| {
        sb.write(name, &serde_json::to_string(v).expect("json")).display().to_string()
    };
    let pa = write("a.json", &a);
    // Identical: every cell the same, exit 0.
    let same = sb.cmd(&["compare", "--tokens", &pa, &pa]);
    assert_exit!(same, 0);
    let text = stdout(&same);
    let cells = a["cells"].as_array().expect("cells").len();
    assert!(text.contains(&format!("summary: {cells} cells, 0 with a difference")), "{text}");
    assert_eq!(text.lines().filter(|l| l.ends_with(" same")).count(), cells, "{text}");

    // One changed byte of one continuation, one changed forward count: exit 1, both named.
    let mut b = a.clone();
    let gen_cell = b["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .position(|c| c["generations"].as_array().is_some_and(|g| !g.is_empty()))
        .expect("a cell with continuations");
    let g = &mut b["cells"][gen_cell]["generations"][0]["text"];
    let t = g.as_str().expect("text").to_string();
    // The first character replaced by another one.
    let first = if t.starts_with('x') { "y" } else { "x" };
    let flipped = format!("{first}{}", t.chars().skip(1).collect::<String>());
    *g = flipped.into();
    let last = cells - 1;
    let f = b["cells"][last]["repetitions"][0]["forward_passes"].as_u64().expect("forwards");
    b["cells"][last]["repetitions"][0]["forward_passes"] = (f + 1).into();
    let pb = write("b.json", &b);
    let diff = sb.cmd(&["compare", "--tokens", &pa, &pb]);
    assert_exit!(diff, 1);
    let text = stdout(&diff);
    assert!(text.contains("prompt 0: continuations differ from byte 0"), "{text}");
    assert!(text.contains(&format!("repetition 0: forward_passes {f} vs {}", f + 1)), "{text}");
    assert!(text.contains(&format!("summary: {cells} cells, 2 with a difference")), "{text}");
    // The perplexities compared are counted; without any the summary says so (no "difference 0").
    let ppl = a["cells"].as_array().expect("cells").iter().flat_map(|c| c["quality"].as_array().into_iter().flatten());
    let ppl = ppl.filter(|q| q["metric"] == "perplexity").count();
    let said =
        if ppl == 0 { "no perplexity in both to compare".to_string() } else { format!("(relative, {ppl} compared)") };
    assert!(text.contains(&said) && !text.contains("(masked"), "{said}: {text}");
    assert_exit!(sb.cmd(&["compare", "--tokens", "--report-only", &pa, &pb]), 0);
    // The options of the other report are refused, not ignored.
    for args in [["--perplexity-rtol", "0.5"], ["--markdown", "--tokens"]] {
        let out = sb.cmd(&["compare", args[0], args[1], &pa, &pb]);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains("--tokens"), "{}", stderr(&out));
    }
    // A tolerance that would count every difference as equal is refused.
    for bad in ["nan", "inf", "-0.1"] {
        let out = sb.cmd(&["compare", "--tokens", "--perplexity-rtol", bad, &pa, &pb]);
        assert_exit!(out, 2);
        assert!(stderr(&out).contains("--perplexity-rtol") && stderr(&out).contains(">= 0"), "{}", stderr(&out));
    }

    // Bundles without continuations: no cell is called "same", and the summary's note makes it exit 1.
    let mut bare = a.clone();
    for cell in bare["cells"].as_array_mut().expect("cells") {
        cell["generations"] = serde_json::json!([]);
    }
    let pbare = write("bare.json", &bare);
    let out = sb.cmd(&["compare", "--tokens", &pbare, &pbare]);
    assert_exit!(out, 1);
    let text = stdout(&out);
    assert_eq!(text.lines().filter(|l| l.ends_with(" same")).count(), 0, "{text}");
    assert_eq!(text.lines().filter(|l| l.contains(" no continuations (")).count(), cells, "{text}");
    assert!(text.contains("note: no continuations to compare"), "{text}");

    // A cell missing from one side.
    let mut c = a.clone();
    c["cells"].as_array_mut().expect("cells").pop();
    let pc = write("c.json", &c);
    let missing = sb.cmd(&["compare", "--tokens", &pa, &pc]);
    assert_exit!(missing, 1);
    assert!(stdout(&missing).contains("missing from"), "{}", stdout(&missing));

    // Latency: a Markdown table of a header, its rule and one row per common cell; A / B as `report --compare`
    // gives BUNDLE / REFERENCE: B's time doubled is a 0.50 ratio.
    let mut d = a.clone();
    let e2e = d["cells"][0]["repetitions"][0]["e2e_ms"].as_f64().expect("e2e");
    d["cells"][0]["repetitions"][0]["e2e_ms"] = (e2e * 2.0).into();
    let pd = write("d.json", &d);
    let table = sb.cmd(&["compare", "--markdown", &pa, &pd]);
    assert_exit!(table, 0);
    let text = stdout(&table);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(rows.len(), cells + 2, "{text}");
    assert!(rows[0].starts_with("| cell | A e2e ms | B e2e ms | A/B |"), "{text}");
    assert_eq!(rows[1].matches("---").count(), 9, "{text}");
    assert_eq!(rows[2].split(" | ").nth(3), Some("0.50"), "{text}");
    // Each bundle's line says its weights are synthetic (the demo's are).
    let a_line = text.lines().find(|l| l.starts_with("A: ")).expect("A line");
    assert!(a_line.ends_with("; SYNTHETIC weights: timing is real, quality is meaningless"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("B: ") && l.contains("SYNTHETIC weights")), "{text}");
    assert!(!text.contains("warning:"), "one grid's bundles: {text}");
    // What the keys do not hold but the cells depend on: another precision, other prompts.
    let mut f = d.clone();
    f["provenance"]["config"]["run"]["dtype"] = "bf16".into();
    f["prompt_set"]["sha256"] = "0".repeat(64).into();
    let pf = write("f.json", &f);
    let text = stdout(&sb.cmd(&["compare", &pa, &pf]));
    assert!(text.contains("warning: the bundles ran at different precisions (A f32, B bf16)"), "{text}");
    assert!(text.contains("warning: the bundles' prompt sets differ"), "{text}");
    // Another model of device of the same kind: the ratios are the devices' too (the study mixes no GPU models);
    // said by report --compare as well, naming the sides as it does.
    let mut g = d.clone();
    g["provenance"]["device"]["name"] = "Another CPU".into();
    let pg = write("g.json", &g);
    let text = stdout(&sb.cmd(&["compare", &pa, &pg]));
    assert!(text.contains("warning: the bundles ran on different devices (A "), "{text}");
    assert!(text.contains(", B Another CPU): their ratios are the devices'"), "{text}");
    let text = stdout(&sb.cmd(&["report", &pa, "--compare", &pg]));
    assert!(text.contains("**Warning:** the bundles ran on different devices (runner "), "{text}");
    assert!(text.contains(", reference Another CPU)"), "{text}");
    // No cell in common: a usage problem, exit 2 naming both files and the fix (latency and tokens alike).
    let mut e = a.clone();
    e["cells"] = serde_json::json!([]);
    let pe = write("e.json", &e);
    for args in [&["compare", &pa, &pe][..], &["compare", "--tokens", &pa, &pe]] {
        let out = sb.cmd(args);
        assert_exit!(out, 2);
        let err = stderr(&out);
        assert!(err.contains("have no cell in common") && err.contains(&pa) && err.contains(&pe), "{err}");
        assert!(err.contains("fix:"), "{err}");
    }
}

#[test]
fn an_absurd_latency_is_printed_in_exponent_form_not_hundreds_of_digits() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../schema/tests/fixtures/v1.5/demo-series.json");
    let sb = Sandbox::new();
    let mut b: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).expect("fixture")).expect("json");
    for r in b["cells"][0]["repetitions"].as_array_mut().expect("reps") {
        r["e2e_ms"] = 1e308.into();
    }
    let huge = sb.write("huge.json", &b.to_string());
    for markdown in [false, true] {
        let mut args = vec!["compare", fixture, huge.to_str().expect("utf8")];
        if markdown {
            args.push("--markdown");
        }
        let out = sb.cmd(&args);
        let text = stdout(&out);
        assert!(text.contains("1.000e308") && text.contains("e-308"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() < 400), "a row as long as the number: {text}");
    }
}
