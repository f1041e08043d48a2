//! The sweep: every known clock read and minter, written every way a handler body can write it,
//! is found by the body scan; a corpus of ordinary handler code is not. Runs on the checker itself
//! (`check::body::scan_body` over token streams), so it needs no compiler run per case.

use proc_macro2::TokenStream;

use crate::check::body::scan_body;
use crate::check::types::find_forbidden_type;
use crate::check::wording::Forbidden;

/// A known forbidden call: the full path of the function (a type's associated function or a free
/// function), the kind, and whether its last segment is called by its bare name after a module-level
/// import in real code (then the bare name alone must be refused).
struct Known {
    path: &'static str,
    kind: Forbidden,
    bare: bool,
}

const fn clock(path: &'static str) -> Known {
    Known {
        path,
        kind: Forbidden::Clock,
        bare: false,
    }
}

const fn mint(path: &'static str, bare: bool) -> Known {
    Known {
        path,
        kind: Forbidden::Minter,
        bare,
    }
}

const KNOWN: &[Known] = &[
    clock("std::time::SystemTime::now"),
    clock("std::time::Instant::now"),
    clock("tokio::time::Instant::now"),
    clock("chrono::Utc::now"),
    clock("chrono::Local::now"),
    clock("chrono::offset::Local::now"),
    clock("time::OffsetDateTime::now_utc"),
    clock("time::OffsetDateTime::now_local"),
    clock("time::UtcDateTime::now"),
    clock("jiff::Timestamp::now"),
    clock("jiff::Zoned::now"),
    clock("uuid::Timestamp::now"),
    mint("uuid::Uuid::new_v4", false),
    mint("uuid::Uuid::now_v1", false),
    mint("uuid::Uuid::now_v6", false),
    mint("uuid::Uuid::now_v7", false),
    mint("uuid::Uuid::new_v7", false),
    mint("uuid::Context::new_random", false),
    mint("ulid::Ulid::new", false),
    mint("ulid::Ulid::from_datetime", false),
    mint("ulid::Generator::new", false),
    mint("rand::random", true),
    mint("rand::random_range", true),
    mint("rand::random_bool", true),
    mint("rand::rng", true),
    mint("rand::thread_rng", true),
    mint("rand::rngs::ThreadRng::default", false),
    mint("rand::rngs::OsRng::default", false),
    mint("rand::rngs::StdRng::from_entropy", false),
    mint("rand::rngs::StdRng::from_os_rng", false),
    mint("rand::rngs::SmallRng::from_rng", false),
    mint("rand_chacha::ChaCha20Rng::from_entropy", false),
    mint("fastrand::u64", false),
    mint("fastrand::Rng::new", false),
    mint("getrandom::getrandom", true),
    mint("getrandom::fill", false),
    mint("cuid::cuid2", true),
    mint("cuid2::create_id", false),
    mint("svix_ksuid::Ksuid::new", false),
    mint("ksuid::Ksuid::generate", false),
];

fn parse(source: &str) -> TokenStream {
    source
        .parse()
        .unwrap_or_else(|e| panic!("does not parse: {source}: {e}"))
}

fn found(source: &str, allow_clock: bool) -> Vec<(Forbidden, String)> {
    scan_body(parse(source), allow_clock)
        .into_iter()
        .map(|f| (f.kind, f.call))
        .collect()
}

/// Every way to write `path(args)` in a body, the imports among them inside the body.
fn forms(known: &Known) -> Vec<String> {
    let segments: Vec<&str> = known.path.split("::").collect();
    let (function, parent) = segments.split_last().expect("a path");
    let call = format!("{}({})", known.path, "");
    let mut forms = vec![
        format!("{{ let x = {call}; }}"),
        format!("{{ let x = ::{call}; }}"),
        format!("{{ let f = || {call}; }}"),
        format!("{{ let f = move |a: u8| {{ let b = a; {call} }}; }}"),
        format!("{{ let f = async move {{ {call} }}; }}"),
        format!("{{ println!(\"{{:?}}\", {call}); }}"),
        format!("{{ tracing::info!(at = ?{call}, \"seen\"); }}"),
        format!("{{ let x = {call}.to_string().len(); }}"),
        format!("{{ if true {{ for i in 0..3 {{ rows.push((i, {call})); }} }} }}"),
        format!("{{ return {call}; }}"),
        format!("{{ let x = {}::<u64>(); }}", known.path),
    ];
    if parent.len() >= 2 {
        // A type's associated function: import the type, or rename it.
        let (ty, _) = parent.split_last().expect("a type");
        let ty_path = parent.join("::");
        forms.push(format!("{{ use {ty_path}; let x = {ty}::{function}(); }}"));
        forms.push(format!(
            "{{ use {ty_path} as Renamed; let x = Renamed::{function}(); }}"
        ));
        forms.push(format!(
            "{{ use {}::{{self as renamed}}; let x = renamed::{ty}::{function}(); }}",
            segments[0]
        ));
        forms.push(format!("{{ let x = <{ty_path}>::{function}(); }}"));
    } else {
        // A free function: import it, rename it, rename its crate.
        forms.push(format!("{{ use {}; let x = {function}(); }}", known.path));
        forms.push(format!(
            "{{ use {} as renamed; let x = renamed(); }}",
            known.path
        ));
        forms.push(format!(
            "{{ use {} as krate; let x = krate::{function}(); }}",
            parent.join("::")
        ));
    }
    if known.bare {
        forms.push(format!("{{ let x = {function}(); }}"));
        forms.push(format!("{{ let x = {function}::<u64>(); }}"));
    }
    forms
}

#[test]
fn every_known_call_is_refused_in_every_form() {
    let mut missed = Vec::new();
    for known in KNOWN {
        for form in forms(known) {
            let found = found(&form, false);
            if !found.iter().any(|(kind, _)| *kind == known.kind) {
                missed.push(form);
            }
        }
    }
    assert!(missed.is_empty(), "not refused:\n{}", missed.join("\n"));
}

#[test]
fn allow_clock_lets_clocks_through_and_nothing_else() {
    for known in KNOWN {
        for form in forms(known) {
            let found = found(&form, true);
            match known.kind {
                Forbidden::Clock => assert!(found.is_empty(), "{form}: {:?}", names(&found)),
                _ => assert!(!found.is_empty(), "not refused under allow_clock: {form}"),
            }
        }
    }
}

#[test]
fn the_epoch_read_now_is_refused() {
    for form in [
        "{ let x = std::time::UNIX_EPOCH.elapsed(); }",
        "{ let x = UNIX_EPOCH.elapsed(); }",
        "{ let x = SystemTime::UNIX_EPOCH.elapsed().unwrap().as_secs(); }",
        "{ let f = || std::time::SystemTime::elapsed(&UNIX_EPOCH); }",
        "{ use std::time::UNIX_EPOCH as EPOCH; let x = EPOCH.elapsed(); }",
        "{ let x = std::time::Instant::now().elapsed(); }",
        "{ let x = rand::thread_rng().gen::<u64>(); }",
        "{ let mut g = ulid::Generator::new(); let id = g.generate(); }",
    ] {
        assert!(!found(form, false).is_empty(), "not refused: {form}");
    }
}

#[test]
fn the_error_names_the_call_as_written() {
    let cases = [
        ("{ chrono::Utc::now() }", "Utc::now"),
        ("{ rand::random::<u8>() }", "rand::random"),
        ("{ use rand::random as r; r() }", "r"),
        ("{ use chrono::Utc as U; U::now() }", "U::now"),
        ("{ std::time::UNIX_EPOCH.elapsed() }", "UNIX_EPOCH.elapsed"),
        (
            "{ ulid::Generator::new().generate() }",
            "ulid::Generator::new",
        ),
        ("{ rand::rngs::ThreadRng::default() }", "ThreadRng::default"),
        ("{ random() }", "random"),
    ];
    for (source, call) in cases {
        let found = found(source, false);
        assert!(
            found.iter().any(|(_, c)| c == call),
            "{source}: {:?}",
            names(&found)
        );
    }
}

fn names(found: &[(Forbidden, String)]) -> Vec<&str> {
    found.iter().map(|(_, c)| c.as_str()).collect()
}

/// Ordinary handler code: times and ids from the payload, durations, deadlines, seeded generators.
const ORDINARY: &[&str] = &[
    "{ let at = chrono::DateTime::parse_from_rfc3339(&event.at)?; }",
    "{ let at: chrono::DateTime<chrono::Utc> = event.at; }",
    "{ let at = chrono::DateTime::<Utc>::from_timestamp(event.secs, 0); }",
    "{ let at = Utc.timestamp_opt(event.secs, 0).single(); }",
    "{ let at: Option<Instant> = None; }",
    "{ let at = time::OffsetDateTime::from_unix_timestamp(event.secs)?; }",
    "{ let at = jiff::Timestamp::from_second(event.secs)?; }",
    "{ let at = std::time::UNIX_EPOCH + Duration::from_secs(event.secs); }",
    "{ let at = SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(event.ms)); }",
    "{ let since = at.duration_since(UNIX_EPOCH)?; }",
    "{ let wait = Duration::from_secs(5) + Duration::from_millis(event.ms) * 2; }",
    "{ tokio::time::sleep(Duration::from_millis(10)).await; }",
    "{ tokio::time::timeout(Duration::from_secs(2), store.write(&event)).await??; }",
    "{ let id = uuid::Uuid::parse_str(&event.id)?; }",
    "{ let id = Uuid::from_u128(event.n); }",
    "{ let id = Uuid::new_v5(&NAMESPACE, unit.id().as_str().as_bytes()); }",
    "{ let id = Uuid::new_v1(uuid::Timestamp::from_unix(&ctx, event.secs, 0), &NODE); }",
    "{ let id = ulid::Ulid::from_string(&event.id)?; }",
    "{ let id = Ulid::from_parts(event.ms, u128::from(event.seq)); }",
    "{ let mut rng = StdRng::seed_from_u64(seed_of(&unit)); let n = rng.random::<u8>(); }",
    "{ let rng = fastrand::Rng::with_seed(seed_of(&unit)); }",
    "{ let random = 4; let x = random + 1; }",
    "{ let now = tick.at; let slot = schedule.now(now); }",
    "{ let now = event.at; format!(\"{now}\"); }",
    "{ let generator = IdGenerator::from_unit(&unit); let id = generator.derive(); }",
    "{ let clock = ClockConfig::default(); let zone = billing::Local::region(); }",
    "{ let started = geo::Instant::from_fix(&event.fix); }",
    "{ fn random(seed: u64) -> u64 { seed } }",
    "{ use std::time::Duration; let d = Duration::ZERO; }",
    "{ use rand::random as unused; use std::time::Instant; }",
];

#[test]
fn ordinary_code_is_accepted() {
    let refused: Vec<String> = ORDINARY
        .iter()
        .filter_map(|source| {
            let found = found(source, false);
            (!found.is_empty()).then(|| format!("{source}: {:?}", names(&found)))
        })
        .collect();
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
}

/// Parameter types the tokens refuse: only where the path says what the type is.
const REFUSED_PARAMS: &[&str] = &[
    "std::time::SystemTime",
    "SystemTime",
    "Option<SystemTime>",
    "State<(u32, SystemTime)>",
    "&std::time::Instant",
    "State<Arc<tokio::time::Instant>>",
    "chrono::Utc",
    "Arc<chrono::offset::Local>",
    "rand::rngs::ThreadRng",
    "State<Arc<Mutex<StdRng>>>",
    "Box<dyn rand::RngCore + Send>",
    "ulid::Generator",
    "uuid::ContextV7",
    "delivery::memory::MemoryHandle",
];

/// Parameter types the tokens leave to the marker traits (a bare `Instant` is std's or anyone's)
/// or accept outright (values, the user's own types).
const LEFT_TO_THE_MARKERS: &[&str] = &[
    "billing::Local",
    "geo::Instant",
    "Instant",
    "State<ClockConfig>",
    "State<Arc<IdGenerator>>",
    "Json<chrono::DateTime<chrono::Utc>>",
    "chrono::DateTime<chrono::Utc>",
    "Timestamp",
    "jiff::Timestamp",
    "time::OffsetDateTime",
    "State<(App, Generator)>",
    "dyn Clock",
];

#[test]
fn parameter_types_are_refused_by_what_the_path_says() {
    for source in REFUSED_PARAMS {
        let ty: syn::Type = syn::parse_str(source).expect("a type");
        assert!(
            find_forbidden_type(&ty, false).is_some(),
            "not refused: {source}"
        );
    }
    for source in LEFT_TO_THE_MARKERS {
        let ty: syn::Type = syn::parse_str(source).expect("a type");
        assert!(
            find_forbidden_type(&ty, false).is_none(),
            "refused by its spelling: {source}"
        );
    }
}
