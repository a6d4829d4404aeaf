//! `config/delayOffset.json`: the schedule service's progress per delay level (spec §9.4), as RocketMQ's
//! `ScheduleMessageService.encode(true)` writes it through `DelayOffsetSerializeWrapper`:
//!
//! ```text
//! {
//! \t"dataVersion":{
//! \t\t"counter":<long>,
//! \t\t"stateVersion":<long>,
//! \t\t"timestamp":<long>
//! \t},
//! \t"offsetTable":{<level>:<offset>,...        (or {} when empty)
//! \t}
//! }
//! ```
//!
//! `offsetTable` maps a delay level (unquoted int key) to the next queue offset to deliver in
//! `SCHEDULE_TOPIC_XXXX` queue level − 1, in the iteration order of the service's `new ConcurrentHashMap<>(32)`
//! (levels below 64: ascending). The reader is [`super`]'s parser (fastjson's unquoted keys and strict JSON);
//! a level that is not a Java int or an offset that is not a Java long is left out and reported.
//!
//! Persisting ([`persist`]) keeps RocketMQ's `.bak` (the previous file) and is atomic: the new text goes to a
//! temporary file that is fsynced, the current file becomes `.bak`, the temporary file is renamed over it, and
//! the directory is fsynced. [`load`] reads the file, or `.bak` when the file is missing, empty or unreadable,
//! as `ConfigManager.load` does.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{
    as_long, as_queue_id, describe, parse_document, read_version, DataVersion, Decoded, FormatError, Issue, Value,
};
use crate::error::{Error, Result};
use crate::java::ConcurrentHashMapOrder;

/// The service's `offsetTable` is `new ConcurrentHashMap<>(32)`.
const OFFSET_TABLE_CAPACITY: usize = 32;
/// The file under the store root (`StorePathConfigHelper.getDelayOffsetStorePath`).
pub const FILE: &str = "config/delayOffset.json";

/// The delay offsets as the service holds them: level → next queue offset, in the Java map's order.
#[derive(Debug, Clone)]
pub struct DelayTable {
    order: ConcurrentHashMapOrder<i32>,
    offsets: HashMap<i32, i64>,
    /// The data version written with the table.
    pub version: DataVersion,
}

impl Default for DelayTable {
    fn default() -> Self {
        DelayTable {
            order: ConcurrentHashMapOrder::with_capacity(OFFSET_TABLE_CAPACITY),
            offsets: HashMap::new(),
            version: DataVersion::default(),
        }
    }
}

impl DelayTable {
    /// The table a broker holds after loading `entries` (file order) and `version` (`offsetTable.putAll`).
    pub fn loaded(entries: &[(i32, i64)], version: DataVersion) -> Self {
        let mut t = DelayTable { version, ..DelayTable::default() };
        for &(level, offset) in entries {
            t.put(level, offset);
        }
        t
    }

    /// `offsetTable.put(level, offset)`.
    pub fn put(&mut self, level: i32, offset: i64) {
        self.order.put(level);
        self.offsets.insert(level, offset);
    }

    /// The offset of `level`, if it has one.
    pub fn get(&self, level: i32) -> Option<i64> {
        self.offsets.get(&level).copied()
    }

    /// (level, offset) in the broker's order.
    pub fn in_order(&self) -> Vec<(i32, i64)> {
        self.order.iter().map(|l| (*l, self.offsets.get(l).copied().unwrap_or_default())).collect()
    }
}

/// `DelayOffsetSerializeWrapper.toJson(true)`: the exact text RocketMQ 5.3.1 persists for the table.
// Format: { "dataVersion":{counter,stateVersion,timestamp} , "offsetTable":{ level:offset,* } } pretty, tabs
pub fn encode(table: &DelayTable) -> String {
    let v = &table.version;
    let mut out = String::with_capacity(160 + table.offsets.len() * 16);
    out.push_str("{\n\t\"dataVersion\":{\n");
    out.push_str(&format!(
        "\t\t\"counter\":{},\n\t\t\"stateVersion\":{},\n\t\t\"timestamp\":{}\n\t}},\n",
        v.counter, v.state_version, v.timestamp
    ));
    let entries = table.in_order();
    if entries.is_empty() {
        out.push_str("\t\"offsetTable\":{}\n}");
        return out;
    }
    out.push_str("\t\"offsetTable\":{");
    let body: Vec<String> = entries.iter().map(|(l, o)| format!("{l}:{o}")).collect();
    out.push_str(&body.join(","));
    out.push_str("\n\t}\n}");
    out
}

/// What [`decode`] read: (level, offset) in file order, the data version, and what was left out.
pub type DecodedDelay = (Vec<(i32, i64)>, DataVersion, Vec<Issue>);

/// Reads `delayOffset.json`. A document that is not JSON, or whose `offsetTable` is not an object, is refused.
pub fn decode(text: &[u8]) -> std::result::Result<DecodedDelay, FormatError> {
    let members = parse_document(text)?;
    let mut meta = Decoded::default();
    let mut table: Vec<(i32, i64)> = Vec::new();
    for (key, value) in members {
        match key.text().as_str() {
            "dataVersion" => read_version(&value, &mut meta),
            "offsetTable" => match value {
                Value::Object(entries) => {
                    for (k, v) in &entries {
                        match (as_queue_id(k), as_long(v)) {
                            (Ok(level), Ok(offset)) => match table.iter_mut().find(|(l, _)| *l == level) {
                                Some(slot) => slot.1 = offset,
                                None => table.push((level, offset)),
                            },
                            (Err(why), _) | (_, Err(why)) => meta.issues.push(Issue {
                                key: Some(k.text()),
                                reason: format!("level {}: {why}; left out", k.text()),
                            }),
                        }
                    }
                }
                Value::Null => {}
                other => {
                    return Err(FormatError {
                        position: 0,
                        reason: format!("offsetTable is {}, not an object", describe(&other)),
                    })
                }
            },
            _ => {}
        }
    }
    Ok((table, meta.version, meta.issues))
}

/// `<file>.bak`.
pub fn bak_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".bak");
    path.with_file_name(name)
}

/// `ConfigManager.load`: the table in `path`, or in `<path>.bak` when `path` is missing, empty or does not
/// decode; an empty table when neither exists. A `.bak` that exists and does not decode is an error (the
/// caller must not start from offset 0 and deliver everything again silently).
pub fn load(path: &Path) -> Result<DelayTable> {
    let read = |p: &Path| -> Result<Option<Vec<u8>>> {
        match std::fs::read(p) {
            Ok(b) if b.is_empty() => Ok(None),
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(p, e)),
        }
    };
    if let Some(bytes) = read(path)? {
        if let Ok((table, version, _)) = decode(&bytes) {
            return Ok(DelayTable::loaded(&table, version));
        }
    }
    let bak = bak_path(path);
    match read(&bak)? {
        // A new `DataVersion` carries the time it was made.
        None => {
            Ok(DelayTable::loaded(&[], DataVersion { timestamp: crate::commitlog::now_ms(), ..DataVersion::default() }))
        }
        Some(bytes) => match decode(&bytes) {
            Ok((table, version, _)) => Ok(DelayTable::loaded(&table, version)),
            Err(e) => Err(Error::Corruption { path: bak, offset: e.position as i64, reason: e.reason }),
        },
    }
}

/// Writes `table` to `path` atomically, keeping the previous file as `<path>.bak` (see the module docs).
pub fn persist(path: &Path, table: &DelayTable) -> Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    crate::mmap::create_dir_durable(dir)?;
    let mut tmp_name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let text = encode(table);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    })();
    if let Err(e) = written {
        // A full disk: the file and its .bak keep their content, and no half-written .tmp is left behind.
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(&tmp, e));
    }
    if path.exists() {
        if let Err(e) = std::fs::rename(path, bak_path(path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::io(path, e));
        }
    }
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
    crate::mmap::sync_dir(dir)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn encodes_fastjson_pretty_with_unquoted_levels() {
        let v = DataVersion { counter: 2, state_version: 0, timestamp: 1_700_000_000_000 };
        let t = DelayTable::loaded(&[(3, 7), (1, 12), (18, 0)], v);
        let text = encode(&t);
        assert_eq!(
            text,
            "{\n\t\"dataVersion\":{\n\t\t\"counter\":2,\n\t\t\"stateVersion\":0,\n\t\t\"timestamp\":1700000000000\n\t},\n\
             \t\"offsetTable\":{1:12,3:7,18:0\n\t}\n}"
        );
        let (table, version, issues) = decode(text.as_bytes()).unwrap();
        assert_eq!((table, version, issues.len()), (vec![(1, 12), (3, 7), (18, 0)], v, 0));
        let empty = DelayTable::default();
        assert!(encode(&empty).ends_with("\t\"offsetTable\":{}\n}"));
    }

    #[test]
    fn bad_entries_are_left_out_and_garbage_is_refused() {
        let (table, _, issues) = decode(br#"{"offsetTable":{"2":5,3:1.5,4:9}}"#).unwrap();
        assert_eq!((table, issues.len()), (vec![(2, 5), (4, 9)], 1));
        assert!(decode(b"{\"offsetTable\":{1:").is_err());
        assert!(decode(b"{\"offsetTable\":[]}").is_err());
    }

    #[test]
    fn persist_keeps_a_bak_and_load_falls_back_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        assert!(load(&path).unwrap().in_order().is_empty());
        persist(&path, &DelayTable::loaded(&[(1, 1)], DataVersion::default())).unwrap();
        persist(&path, &DelayTable::loaded(&[(1, 2)], DataVersion::default())).unwrap();
        assert_eq!(load(&path).unwrap().in_order(), vec![(1, 2)]);
        std::fs::write(&path, b"{\"offsetTable\":{1:").unwrap(); // torn
        assert_eq!(load(&path).unwrap().in_order(), vec![(1, 1)]);
        std::fs::write(&path, b"").unwrap();
        assert_eq!(load(&path).unwrap().in_order(), vec![(1, 1)]);
        std::fs::write(bak_path(&path), b"garbage").unwrap();
        assert!(matches!(load(&path), Err(Error::Corruption { .. })));
    }
}
