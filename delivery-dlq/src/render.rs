//! How records are printed: a table, one record in full, JSON; payloads pretty-printed when they
//! are JSON and escaped when they are not, summed up by size and SHA-256 where an edit replaces
//! them; times in RFC 3339 (UTC).

use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use delivery::dead_letter::DeadLetter;
use delivery::disposition::ReasonKind;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// The longest detail a table row shows; `show` prints it whole.
const DETAIL_WIDTH: usize = 60;

/// A reason as printed, `unknown` where none was recorded.
pub fn reason(reason: Option<ReasonKind>) -> &'static str {
    reason.map_or("unknown", ReasonKind::as_str)
}

/// `bytes` as text: valid UTF-8 as it is, control characters, backslashes and invalid bytes
/// escaped (`\t`, `\u{1b}`, `\\`, `\xff`); newlines too unless `keep_newlines`.
pub fn escaped(bytes: &[u8], keep_newlines: bool) -> String {
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' if keep_newlines => text.push('\n'),
                '\n' => text.push_str("\\n"),
                '\r' => text.push_str("\\r"),
                '\t' => text.push_str("\\t"),
                '\\' => text.push_str("\\\\"),
                c if c.is_control() => {
                    let _ = write!(text, "\\u{{{:x}}}", u32::from(c));
                }
                c => text.push(c),
            }
        }
        for byte in chunk.invalid() {
            let _ = write!(text, "\\x{byte:02x}");
        }
    }
    text
}

/// `at` in RFC 3339, UTC: whole seconds, or with milliseconds when `millis`.
pub fn time(at: SystemTime, millis: bool) -> String {
    let Ok(since) = at.duration_since(UNIX_EPOCH) else {
        return "before 1970".to_owned();
    };
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    let (h, m, s) = (of_day / 3600, of_day % 3600 / 60, of_day % 60);
    let mut text = format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}");
    if millis {
        let _ = write!(text, ".{:03}", since.subsec_millis());
    }
    text.push('Z');
    text
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The payload as JSON output carries it: the JSON value itself when it is JSON, else its text
/// (escaped where it is not UTF-8), with which of the three it is.
fn payload_json(payload: &[u8]) -> (Value, &'static str) {
    if let Ok(value) = serde_json::from_slice::<Value>(payload) {
        return (value, "json");
    }
    match std::str::from_utf8(payload) {
        Ok(text) => (Value::String(text.to_owned()), "text"),
        Err(_) => (Value::String(escaped(payload, true)), "escaped"),
    }
}

/// One record as a JSON object (`list --json`, `show --json`).
pub fn record_json(record: &DeadLetter) -> Value {
    let headers: serde_json::Map<String, Value> = record
        .unit
        .headers()
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value).into_owned();
            (name.to_owned(), Value::String(value))
        })
        .collect();
    let (payload, encoding) = payload_json(record.unit.payload());
    json!({
        "id": record.id().as_str(),
        "position": record.position,
        "reason": record.reason.map(ReasonKind::as_str),
        "detail": record.detail,
        "source": record.source,
        "delivery_count": record.delivery_count().get(),
        "dead_lettered_at": record.dead_lettered_at.map(|at| time(at, true)),
        "headers": headers,
        "payload": payload,
        "payload_encoding": encoding,
    })
}

/// The lowercase hex SHA-256 of `payload`, as `x-delivery-original-sha256` records it.
pub fn sha256(payload: &[u8]) -> String {
    hex::encode(Sha256::digest(payload))
}

/// A payload in one line, as an edited redrive's confirmation shows it: its size, whether it is
/// JSON, and its digest.
pub fn payload_summary(payload: &[u8]) -> String {
    let kind = match serde_json::from_slice::<Value>(payload) {
        Ok(_) => "JSON",
        Err(_) => "not JSON",
    };
    format!(
        "{} bytes, {kind}, sha256 {}",
        payload.len(),
        sha256(payload)
    )
}

/// `rows` in columns under `header` (none when empty), two spaces apart.
pub fn table(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let columns = rows
        .iter()
        .map(Vec::len)
        .chain([header.len()])
        .max()
        .unwrap_or(0);
    let mut widths = vec![0; columns];
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let all = || {
        std::iter::once(&header)
            .filter(|h| !h.is_empty())
            .chain(rows)
    };
    for row in all() {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in all() {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// `text` cut to `width` characters, an ellipsis marking the cut.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(width - 1).collect();
        cut.push('…');
        cut
    }
}

/// The records as a table, one line each.
pub fn records(out: &mut impl Write, records: &[DeadLetter]) -> io::Result<()> {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                escaped(r.position.as_bytes(), false),
                escaped(r.id().as_str().as_bytes(), false),
                reason(r.reason).to_owned(),
                r.delivery_count().to_string(),
                escaped(r.source.as_bytes(), false),
                r.dead_lettered_at
                    .map_or("-".to_owned(), |at| time(at, false)),
                cut(&escaped(r.detail.as_bytes(), false), DETAIL_WIDTH),
            ]
        })
        .collect();
    let header = [
        "POSITION",
        "ID",
        "REASON",
        "DELIVERIES",
        "SOURCE",
        "DEAD SINCE",
        "DETAIL",
    ];
    table(out, &header, &rows)
}

/// One record in full: its fields, headers and payload.
pub fn show(out: &mut impl Write, dead_letter: &str, record: &DeadLetter) -> io::Result<()> {
    let field = |value: &str| escaped(value.as_bytes(), false);
    let at = record
        .dead_lettered_at
        .map_or("not recorded".to_owned(), |at| time(at, true));
    let rows = vec![
        vec!["id:".to_owned(), field(record.id().as_str())],
        vec!["dead letter:".to_owned(), field(dead_letter)],
        vec!["position:".to_owned(), field(&record.position)],
        vec!["source:".to_owned(), field(&record.source)],
        vec!["reason:".to_owned(), reason(record.reason).to_owned()],
        vec!["detail:".to_owned(), field(&record.detail)],
        vec![
            "deliveries:".to_owned(),
            record.delivery_count().to_string(),
        ],
        vec!["dead since:".to_owned(), at],
    ];
    table(out, &[], &rows)?;
    let headers = record.unit.headers();
    if headers.is_empty() {
        writeln!(out, "headers:      none")?;
    } else {
        writeln!(out, "headers:")?;
        for (name, value) in headers.iter() {
            writeln!(out, "  {}: {}", field(name), escaped(value, false))?;
        }
    }
    let payload = record.unit.payload();
    match serde_json::from_slice::<Value>(payload) {
        Ok(value) => {
            writeln!(out, "payload (JSON, {} bytes):", payload.len())?;
            writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
        }
        Err(_) => {
            writeln!(out, "payload (not JSON, {} bytes, escaped):", payload.len())?;
            writeln!(out, "{}", escaped(payload, true))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_are_rfc3339_utc() {
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(time(at, false), "2023-11-14T22:13:20Z");
        assert_eq!(time(at, true), "2023-11-14T22:13:20.123Z");
        assert_eq!(time(UNIX_EPOCH, false), "1970-01-01T00:00:00Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(time(leap, false), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn digests_are_lowercase_hex_sha256() {
        assert_eq!(
            sha256(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(payload_summary(b"{}").starts_with("2 bytes, JSON, sha256 44136fa3"));
        assert!(payload_summary(b"{oops").starts_with("5 bytes, not JSON, sha256 "));
    }

    #[test]
    fn escaping_keeps_text_and_marks_the_rest() {
        assert_eq!(escaped(b"caf\xc3\xa9 ok", false), "café ok");
        assert_eq!(
            escaped(b"a\nb\tc\x1b\\\xff", false),
            "a\\nb\\tc\\u{1b}\\\\\\xff"
        );
        assert_eq!(escaped(b"a\nb", true), "a\nb");
    }
}
