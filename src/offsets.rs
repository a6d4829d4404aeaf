//! `config/consumerOffset.json`: the broker's committed consumer offsets (spec §9.2, §9.3).
//!
//! The file is the text fastjson 1.2.83 writes for `ConsumerOffsetManager.encode(true)`: a pretty print with
//! tab indentation, bean properties in alphabetical order, integer map keys *unquoted*, and maps in the
//! iteration order of the broker's Java hash maps:
//!
//! ```text
//! {
//! \t"dataVersion":{
//! \t\t"counter":<long>,
//! \t\t"stateVersion":<long>,
//! \t\t"timestamp":<long>
//! \t},
//! \t"groupTopicMap":{                      (or {}, when there are no entries)
//! \t\t"<group>":["<topic>",...],          HashMap(128) order; topics in HashSet(8) order
//! \t},
//! \t"offsetTable":{                        (or {})
//! \t\t"<topic>@<group>":{<queue id>:<offset>,...      the table's order; queue ids in their map's order
//! \t\t},
//! \t}
//! }
//! ```
//!
//! Both orders are those of `ConcurrentHashMap`s whose history decides them: [`BrokerTable`] follows the
//! broker's maps through every commit, load and removal ([`crate::java::ConcurrentHashMapOrder`]), so rmq
//! persists the bytes RocketMQ 5.3.1 persists after the same history (RocketMQ 4.9.x: the same `offsetTable`;
//! its file has nothing else). Proven against both with randomized tables in `tests/test_interop_offsets.py`.
//!
//! Strings are escaped as fastjson does: `"`, `\`, `\n`, `\r`, `\t`, `\b`, `\f` by name, other control
//! characters, DEL and the line terminators U+2028 and U+2029 as `\uXXXX`, everything else (non-ASCII
//! included) as is.
//!
//! The reader takes fastjson's unquoted integer keys and strict JSON alike. It is tolerant per entry: a
//! queue whose id is not a Java int or whose offset is not a Java long, or an entry that is not an object, is
//! left out and reported as an [`Issue`]; every good entry is kept. Only a document that is not JSON at all,
//! or whose `offsetTable` is not an object, is refused as a whole ([`FormatError`], with the byte position);
//! [`salvage`] then recovers the entries that still parse on their own.

use std::collections::HashMap;

use crate::java::{ConcurrentHashMapOrder, HashMapOrder};

pub mod delay;
pub mod journal;
pub mod local;
pub mod topics;

/// `TOPIC_GROUP_SEPARATOR`: table keys are `topic@group`.
pub const TOPIC_GROUP_SEPARATOR: char = '@';

/// The broker's `offsetTable` is `new ConcurrentHashMap<>(512)` (1 024 bins).
const OFFSET_TABLE_CAPACITY: usize = 512;
/// `commitOffset` gives a new `topic@group` a `new ConcurrentHashMap<>(32)` (64 bins).
const QUEUE_MAP_CAPACITY: usize = 32;
/// `getGroupTopicMap` builds a `new HashMap<>(128)`.
const GROUP_MAP_CAPACITY: usize = 128;
/// ... of `new HashSet<>(8)`s.
const TOPIC_SET_CAPACITY: usize = 8;
/// Nesting deeper than this is not a consumerOffset.json (and would only cost stack).
const MAX_DEPTH: usize = 64;

/// RocketMQ's `DataVersion`, bumped on every persist of a changed table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataVersion {
    /// Persists of a changed table.
    pub counter: i64,
    /// The broker's state version (0 unless a controller sets it).
    pub state_version: i64,
    /// Milliseconds since the epoch of the last bump.
    pub timestamp: i64,
}

/// One key's committed offsets: (queue id, next queue offset to consume).
pub type QueueOffsets = Vec<(i32, i64)>;

/// The offset table in insertion order (the order decides where keys land within a Java hash bin).
pub type OffsetTable = Vec<(String, QueueOffsets)>;

/// A part of the file that was left out while reading it; the rest was kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// The `offsetTable` key concerned, when the problem is inside one entry.
    pub key: Option<String>,
    /// What is wrong, for the user.
    pub reason: String,
}

/// A document that cannot be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (at byte {position})")]
pub struct FormatError {
    /// Byte offset in the file where reading stopped.
    pub position: usize,
    /// What was expected.
    pub reason: String,
}

/// What [`decode`] read: the good entries, the data version, and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decoded {
    /// Entries in file order, each with its queues in file order; a repeated key or queue keeps its last value.
    pub table: OffsetTable,
    /// The `dataVersion` (fields that are missing or unreadable are 0 and reported).
    pub version: DataVersion,
    /// Entries, queues or fields left out.
    pub issues: Vec<Issue>,
}

// -- writing ------------------------------------------------------------------------------------------------

/// A JSON string as fastjson writes it.
fn quote(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\u{:04X}", c as u32)),
            // JavaScript's line terminators, which fastjson escapes too.
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// One `topic@group` entry as the broker holds it: a `ConcurrentMap<Integer, Long>` of queue id to offset.
#[derive(Debug, Clone)]
struct Queues {
    order: ConcurrentHashMapOrder<i32>,
    offsets: HashMap<i32, i64>,
}

impl Queues {
    fn put(&mut self, queue_id: i32, offset: i64) {
        self.order.put(queue_id);
        self.offsets.insert(queue_id, offset);
    }

    fn in_order(&self) -> QueueOffsets {
        self.order.iter().map(|q| (*q, self.offsets.get(q).copied().unwrap_or_default())).collect()
    }
}

/// The offset table as RocketMQ's broker holds it, so that it encodes to the broker's bytes: the maps' Java
/// iteration orders are followed through every change, since they depend on the history of the table (where it
/// came from, the order keys and queues arrived in, and removals), not only on its content.
///
/// [`BrokerTable::new`] is the table of a broker that loaded nothing (`new ConcurrentHashMap<>(512)`), where
/// each new `topic@group` gets a `new ConcurrentHashMap<>(32)`; [`BrokerTable::decoded`] the table fastjson
/// builds when the broker loads a file (`new ConcurrentHashMap<>()` for the table and for each entry, filled in
/// file order). Both RocketMQ 5.3.1 and 4.9.x hold their tables this way.
#[derive(Debug, Clone)]
pub struct BrokerTable {
    order: ConcurrentHashMapOrder<String>,
    entries: HashMap<String, Queues>,
}

impl Default for BrokerTable {
    fn default() -> Self {
        Self::new()
    }
}

impl BrokerTable {
    /// The table of a broker that has loaded nothing.
    pub fn new() -> Self {
        BrokerTable { order: ConcurrentHashMapOrder::with_capacity(OFFSET_TABLE_CAPACITY), entries: HashMap::new() }
    }

    /// The table fastjson builds from a file's entries (`table` in file order, as [`decode`] returns them).
    pub fn decoded(table: &[(String, QueueOffsets)]) -> Self {
        let mut t = BrokerTable { order: ConcurrentHashMapOrder::new(), entries: HashMap::new() };
        for (key, queues) in table {
            t.insert_decoded(key, queues);
        }
        t
    }

    /// Adds one entry as fastjson does while decoding: a new `ConcurrentHashMap` filled in order, then put
    /// into the table (replacing an entry of the same key in place).
    pub fn insert_decoded(&mut self, key: &str, queues: &[(i32, i64)]) {
        let mut q = Queues { order: ConcurrentHashMapOrder::new(), offsets: HashMap::new() };
        for &(id, offset) in queues {
            q.put(id, offset);
        }
        self.order.put(key.to_owned());
        self.entries.insert(key.to_owned(), q);
    }

    /// `commitOffset(key, queueId, offset)`.
    pub fn commit(&mut self, key: &str, queue_id: i32, offset: i64) {
        match self.entries.get_mut(key) {
            Some(q) => q.put(queue_id, offset),
            None => {
                let mut q = Self::new_queues();
                q.put(queue_id, offset);
                self.order.put(key.to_owned());
                self.entries.insert(key.to_owned(), q);
            }
        }
    }

    /// An entry without queues (no commit makes one; a table handed to [`encode`] may have it), created as a
    /// commit creates one.
    pub fn add_empty(&mut self, key: &str) {
        if !self.entries.contains_key(key) {
            self.order.put(key.to_owned());
            self.entries.insert(key.to_owned(), Self::new_queues());
        }
    }

    fn new_queues() -> Queues {
        Queues { order: ConcurrentHashMapOrder::with_capacity(QUEUE_MAP_CAPACITY), offsets: HashMap::new() }
    }

    /// Removes an entry (`offsetTable.remove(key)`); returns whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        let key = key.to_owned();
        self.entries.remove(&key);
        self.order.remove(&key)
    }

    /// The committed offset of one queue.
    pub fn get(&self, key: &str, queue_id: i32) -> Option<i64> {
        self.entries.get(key)?.offsets.get(&queue_id).copied()
    }

    /// Whether `key` has an entry.
    pub fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// One entry's queues in the broker's order.
    pub fn queues(&self, key: &str) -> Option<QueueOffsets> {
        self.entries.get(key).map(Queues::in_order)
    }

    /// Keys in the broker's order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(String::as_str)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in the broker's order, each with its queues in the broker's order.
    pub fn in_order(&self) -> OffsetTable {
        self.order.iter().filter_map(|k| Some((k.clone(), self.entries.get(k)?.in_order()))).collect()
    }
}

/// `ConsumerOffsetManager.encode(true)` of RocketMQ 5.3.1 (what its persist writes): the exact text for the
/// table. RocketMQ 4.9.x writes the same `offsetTable` (only `offsetTable`: it has no `dataVersion` and no
/// `groupTopicMap`, and ignores them when it reads).
pub fn encode(table: &BrokerTable, version: &DataVersion) -> String {
    let mut out = String::with_capacity(128 + table.len() * 64);
    out.push_str("{\n\t\"dataVersion\":{\n");
    out.push_str(&format!(
        "\t\t\"counter\":{},\n\t\t\"stateVersion\":{},\n\t\t\"timestamp\":{}\n\t}},\n",
        version.counter, version.state_version, version.timestamp
    ));
    // groupTopicMap: a HashMap(128) of HashSet(8)s filled walking offsetTable in its order; keys that do not
    // split in two are left out.
    let mut groups: HashMapOrder<&str> = HashMapOrder::with_capacity(GROUP_MAP_CAPACITY);
    let mut topics: HashMap<&str, HashMapOrder<&str>> = HashMap::new();
    for key in table.keys() {
        if let [topic, group] = crate::java::split_java(key, TOPIC_GROUP_SEPARATOR)[..] {
            groups.put(group);
            topics.entry(group).or_insert_with(|| HashMapOrder::with_capacity(TOPIC_SET_CAPACITY)).put(topic);
        }
    }
    let group_order: Vec<&str> = groups.iter().copied().collect();
    if group_order.is_empty() {
        out.push_str("\t\"groupTopicMap\":{},\n");
    } else {
        out.push_str("\t\"groupTopicMap\":{\n");
        for (n, group) in group_order.iter().enumerate() {
            out.push_str("\t\t");
            quote(&mut out, group);
            out.push_str(":[");
            for (t, topic) in topics.get(group).into_iter().flat_map(HashMapOrder::iter).enumerate() {
                if t > 0 {
                    out.push(',');
                }
                quote(&mut out, topic);
            }
            out.push(']');
            if n + 1 < group_order.len() {
                out.push(',');
            }
            out.push('\n');
        }
        out.push_str("\t},\n");
    }
    if table.is_empty() {
        out.push_str("\t\"offsetTable\":{}\n}");
        return out;
    }
    out.push_str("\t\"offsetTable\":{\n");
    let entries = table.in_order();
    for (n, (key, queues)) in entries.iter().enumerate() {
        out.push_str("\t\t");
        quote(&mut out, key);
        out.push_str(":{");
        let body: Vec<String> = queues.iter().map(|(q, o)| format!("{q}:{o}")).collect();
        out.push_str(&body.join(","));
        out.push_str(if queues.is_empty() { "}" } else { "\n\t\t}" });
        if n + 1 < entries.len() {
            out.push(',');
        }
        out.push('\n');
    }
    out.push_str("\t}\n}");
    out
}

// -- reading ------------------------------------------------------------------------------------------------

/// A parsed JSON value; numbers and undecodable strings keep their text for the messages.
#[derive(Debug)]
enum Value {
    Object(Vec<(Key, Value)>),
    Array(Vec<Value>),
    Str(Result<String, String>),
    Number(String),
    Bool(bool),
    Null,
}

/// An object key: a string, fastjson's unquoted integer, or fastjson's object key (a map keyed by beans, as
/// the client's `offsets.json` is: [`local`]).
#[derive(Debug)]
enum Key {
    Str(Result<String, String>),
    Int(String),
    Object(Vec<(Key, Value)>),
}

impl Key {
    fn text(&self) -> String {
        match self {
            Key::Str(Ok(s)) => s.clone(),
            Key::Str(Err(raw)) | Key::Int(raw) => raw.clone(),
            Key::Object(_) => "{...}".to_string(),
        }
    }
}

struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
}

/// Parses a whole config file that must be one JSON object (fastjson's syntax) and returns its members; the
/// start of every decoder here.
fn parse_document(text: &[u8]) -> Result<Vec<(Key, Value)>, FormatError> {
    let mut p = Parser { text, pos: 0 };
    let doc = p.value(0)?;
    if p.peek().is_some() {
        return p.error("trailing content after the JSON document");
    }
    match doc {
        Value::Object(members) => Ok(members),
        _ => Err(FormatError { position: 0, reason: "the document is not an object".into() }),
    }
}

impl<'a> Parser<'a> {
    fn error<T>(&self, reason: impl Into<String>) -> Result<T, FormatError> {
        Err(FormatError { position: self.pos, reason: reason.into() })
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.text.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.text.get(self.pos).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), FormatError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            self.error(format!("expected {:?}", byte as char))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, FormatError> {
        if depth > MAX_DEPTH {
            return self.error("nested too deeply");
        }
        match self.peek() {
            Some(b'{') => {
                self.pos += 1;
                let mut members = Vec::new();
                if self.peek() == Some(b'}') {
                    self.pos += 1;
                    return Ok(Value::Object(members));
                }
                loop {
                    let key = match self.peek() {
                        Some(b'"') => Key::Str(self.string()?),
                        Some(b'-' | b'0'..=b'9') => Key::Int(self.integer_key()?),
                        Some(b'{') => match self.value(depth + 1)? {
                            Value::Object(members) => Key::Object(members),
                            _ => return self.error("expected an object key"),
                        },
                        _ => return self.error("expected an object key"),
                    };
                    self.expect(b':')?;
                    let v = self.value(depth + 1)?;
                    members.push((key, v));
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {
                            self.pos += 1;
                            return Ok(Value::Object(members));
                        }
                        _ => return self.error("expected ',' or '}'"),
                    }
                }
            }
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(Value::Array(items));
                        }
                        _ => return self.error("expected ',' or ']'"),
                    }
                }
            }
            Some(b'"') => self.string().map(Value::Str),
            Some(b'-' | b'0'..=b'9') => Ok(Value::Number(self.number()?)),
            Some(b't') => self.word("true").map(|_| Value::Bool(true)),
            Some(b'f') => self.word("false").map(|_| Value::Bool(false)),
            Some(b'n') => self.word("null").map(|_| Value::Null),
            Some(_) => self.error("unexpected character"),
            None => self.error("unexpected end of file"),
        }
    }

    fn word(&mut self, w: &str) -> Result<(), FormatError> {
        if self.text.get(self.pos..self.pos + w.len()) == Some(w.as_bytes()) {
            self.pos += w.len();
            Ok(())
        } else {
            self.error(format!("expected {w}"))
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.text.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn integer_key(&mut self) -> Result<String, FormatError> {
        let start = self.pos;
        if self.text.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        if self.digits() == 0 {
            return self.error("expected digits");
        }
        Ok(String::from_utf8_lossy(&self.text[start..self.pos]).into_owned())
    }

    fn number(&mut self) -> Result<String, FormatError> {
        let start = self.pos;
        self.integer_key()?;
        if self.text.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return self.error("expected digits after '.'");
            }
        }
        if let Some(b'e' | b'E') = self.text.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.text.get(self.pos) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return self.error("expected an exponent");
            }
        }
        Ok(String::from_utf8_lossy(&self.text[start..self.pos]).into_owned())
    }

    fn hex4(&mut self) -> Result<u16, FormatError> {
        let hex = self.text.get(self.pos..self.pos + 4).and_then(|h| std::str::from_utf8(h).ok());
        match hex.and_then(|h| u16::from_str_radix(h, 16).ok()) {
            Some(v) => {
                self.pos += 4;
                Ok(v)
            }
            None => self.error("bad \\u escape"),
        }
    }

    /// A string: Ok(text), or Err(its raw bytes, lossily) when it is not valid UTF-8 or holds a lone
    /// surrogate; the parser goes on after it either way.
    fn string(&mut self) -> Result<Result<String, String>, FormatError> {
        self.expect(b'"')?;
        let start = self.pos;
        let mut units: Vec<u16> = Vec::new();
        let mut bytes: Vec<u8> = Vec::new();
        let mut bad: Option<&'static str> = None;
        let flush = |bytes: &mut Vec<u8>, units: &mut Vec<u16>, bad: &mut Option<&'static str>| {
            match std::str::from_utf8(bytes) {
                Ok(s) => units.extend(s.encode_utf16()),
                Err(_) => *bad = Some("is not valid UTF-8"),
            }
            bytes.clear();
        };
        loop {
            let Some(&b) = self.text.get(self.pos) else { return self.error("unterminated string") };
            self.pos += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    flush(&mut bytes, &mut units, &mut bad);
                    let Some(&esc) = self.text.get(self.pos) else { return self.error("unterminated string") };
                    self.pos += 1;
                    let unit = match esc {
                        b'"' => u16::from(b'"'),
                        b'\\' => u16::from(b'\\'),
                        b'/' => u16::from(b'/'),
                        b'b' => 8,
                        b'f' => 12,
                        b'n' => u16::from(b'\n'),
                        b'r' => u16::from(b'\r'),
                        b't' => u16::from(b'\t'),
                        b'u' => self.hex4()?,
                        _ => return self.error("bad escape"),
                    };
                    units.push(unit);
                }
                _ => bytes.push(b),
            }
        }
        flush(&mut bytes, &mut units, &mut bad);
        let raw = || String::from_utf8_lossy(&self.text[start..self.pos - 1]).into_owned();
        if let Some(why) = bad {
            return Ok(Err(format!("{} {why}", raw())));
        }
        match String::from_utf16(&units) {
            Ok(s) => Ok(Ok(s)),
            Err(_) => Ok(Err(format!("{} holds a lone surrogate", raw()))),
        }
    }
}

/// A JSON number as a Java long, if it is one (an integer in range).
fn as_long(v: &Value) -> Result<i64, String> {
    match v {
        Value::Number(n) => n.parse::<i64>().map_err(|_| format!("{n} is not a Java long")),
        other => Err(format!("{} is not a Java long", describe(other))),
    }
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "an object",
        Value::Array(_) => "an array",
        Value::Str(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
    }
}

/// A queue id key (`0` or `"0"`) as a Java int.
fn as_queue_id(k: &Key) -> Result<i32, String> {
    let text = match k {
        Key::Int(t) | Key::Str(Ok(t)) => t.as_str(),
        Key::Str(Err(raw)) => return Err(format!("queue id {raw} is not readable")),
        Key::Object(_) => return Err("queue id is an object".into()),
    };
    crate::java::parse_int(text).ok_or_else(|| format!("queue id {text:?} is not a Java int"))
}

/// Replaces or appends `(k, v)` keeping the first position of `k`.
fn upsert<K: PartialEq, V>(items: &mut Vec<(K, V)>, k: K, v: V) {
    match items.iter_mut().find(|(key, _)| *key == k) {
        Some(slot) => slot.1 = v,
        None => items.push((k, v)),
    }
}

/// Reads `consumerOffset.json` (bytes as found on disk). See the module docs for what is tolerated.
pub fn decode(text: &[u8]) -> Result<Decoded, FormatError> {
    let members = parse_document(text)?;
    let mut out = Decoded::default();
    for (key, value) in members {
        match key.text().as_str() {
            "dataVersion" => read_version(&value, &mut out),
            "offsetTable" => match value {
                Value::Object(entries) => read_table(entries, &mut out),
                Value::Null => {}
                other => {
                    return Err(FormatError {
                        position: 0,
                        reason: format!("offsetTable is {}, not an object", describe(&other)),
                    })
                }
            },
            _ => {} // groupTopicMap and unknown properties are ignored, as RocketMQ does
        }
    }
    Ok(out)
}

/// Recovers what it can from a document [`decode`] refuses (a torn write, flipped or zeroed bytes): the
/// `dataVersion` if it still parses, and every `offsetTable` entry that still parses on its own. After damage
/// it resumes at the next line that starts an entry in fastjson's layout (`\n\t\t"`). Each damaged span is
/// reported; an entry cut by the damage is lost (the caller should prefer an intact `.bak`).
pub fn salvage(text: &[u8]) -> Decoded {
    let mut out = Decoded::default();
    if let Some(at) = find(text, b"\"dataVersion\"", 0) {
        let mut p = Parser { text, pos: at };
        if let Ok(v) = p.string().and_then(|_| p.expect(b':')).and_then(|()| p.value(0)) {
            read_version(&v, &mut out);
        }
    }
    let Some(at) = find(text, b"\"offsetTable\"", 0) else {
        out.issues.push(Issue { key: None, reason: "no offsetTable found; nothing salvaged".into() });
        return out;
    };
    let mut p = Parser { text, pos: at };
    if p.string().and_then(|_| p.expect(b':')).and_then(|()| p.expect(b'{')).is_err() {
        out.issues.push(Issue { key: None, reason: format!("offsetTable unreadable at byte {}", p.pos) });
        return out;
    }
    loop {
        let start = p.pos;
        let member = (|| {
            let key = Key::Str(p.string()?);
            p.expect(b':')?;
            let value = p.value(1)?;
            Ok::<_, FormatError>((key, value))
        })();
        let err = match member {
            Ok(entry) => {
                read_table(vec![entry], &mut out);
                match p.peek() {
                    Some(b',') => {
                        p.pos += 1;
                        continue;
                    }
                    Some(b'}') => return out,
                    _ => FormatError { position: p.pos, reason: "expected ',' or '}'".into() },
                }
            }
            Err(e) => e,
        };
        let resume = find(text, b"\n\t\t\"", err.position.max(start + 1));
        let end = resume.map_or(text.len(), |r| r + 1);
        let reason = format!("damaged bytes {}..{} skipped ({})", start, end, err.reason);
        out.issues.push(Issue { key: None, reason });
        match resume {
            Some(r) => p.pos = r + 3,
            None => return out,
        }
    }
}

/// The first position of `needle` in `hay` at or after `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|i| i + from)
}

fn read_version(value: &Value, out: &mut Decoded) {
    let fields = match value {
        Value::Object(fields) => fields,
        Value::Null => return,
        other => {
            let reason = format!("dataVersion is {}, not an object; read as 0", describe(other));
            out.issues.push(Issue { key: None, reason });
            return;
        }
    };
    for (k, v) in fields {
        let name = k.text();
        let slot = match name.as_str() {
            "counter" => &mut out.version.counter,
            "stateVersion" => &mut out.version.state_version,
            "timestamp" => &mut out.version.timestamp,
            _ => continue,
        };
        match as_long(v) {
            Ok(n) => *slot = n,
            Err(why) => out.issues.push(Issue { key: None, reason: format!("dataVersion.{name}: {why}; read as 0") }),
        }
    }
}

fn read_table(entries: Vec<(Key, Value)>, out: &mut Decoded) {
    for (key, queues) in entries {
        let name = match key {
            Key::Str(Ok(s)) => s,
            Key::Str(Err(raw)) => {
                out.issues.push(Issue { key: None, reason: format!("entry key {raw} is unreadable; entry left out") });
                continue;
            }
            Key::Int(raw) => {
                out.issues.push(Issue { key: Some(raw), reason: "entry key is not a string; entry left out".into() });
                continue;
            }
            Key::Object(_) => {
                out.issues.push(Issue { key: None, reason: "entry key is an object; entry left out".into() });
                continue;
            }
        };
        let members = match queues {
            Value::Object(members) => members,
            Value::Null => continue,
            other => {
                let reason = format!("offsets are {}, not an object; entry left out", describe(&other));
                out.issues.push(Issue { key: Some(name), reason });
                continue;
            }
        };
        let mut good: QueueOffsets = Vec::with_capacity(members.len());
        for (q, o) in &members {
            match (as_queue_id(q), as_long(o)) {
                (Ok(q), Ok(o)) => upsert(&mut good, q, o),
                (Err(why), _) | (_, Err(why)) => {
                    let reason = format!("queue {}: {why}; queue left out", q.text());
                    out.issues.push(Issue { key: Some(name.clone()), reason });
                }
            }
        }
        upsert(&mut out.table, name, good);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAVA: &str = include_str!("../tests/data/consumerOffset-rocketmq-5.3.1.json");

    fn q(pairs: &[(i32, i64)]) -> QueueOffsets {
        pairs.to_vec()
    }

    /// A fresh broker table after committing `table` in order.
    fn broker(table: &[(String, QueueOffsets)]) -> BrokerTable {
        let mut t = BrokerTable::new();
        for (key, queues) in table {
            for &(id, offset) in queues {
                t.commit(key, id, offset);
            }
        }
        t
    }

    #[test]
    fn encodes_rocketmq_531_bytes() {
        let table: OffsetTable = vec![
            ("TopicTest@GID_A".into(), q(&[(0, 250), (1, 250), (2, 249), (3, 251)])),
            ("%RETRY%GID_A@GID_A".into(), q(&[(0, 0)])),
            ("T\"x\u{e9}\n@G2".into(), q(&[(17, 5)])),
            ("Orders@G2".into(), q(&[(100, 7)])),
        ];
        let decoded = decode(JAVA.as_bytes()).expect("the Java file decodes");
        assert!(decoded.issues.is_empty());
        assert_eq!(decoded.version.counter, 1);
        assert_eq!(encode(&broker(&table), &decoded.version), JAVA);
    }

    #[test]
    fn empty_table() {
        let v = DataVersion { counter: 0, state_version: 0, timestamp: 5 };
        let expected =
            "{\n\t\"dataVersion\":{\n\t\t\"counter\":0,\n\t\t\"stateVersion\":0,\n\t\t\"timestamp\":5\n\t},\n\
                        \t\"groupTopicMap\":{},\n\t\"offsetTable\":{}\n}";
        assert_eq!(encode(&BrokerTable::new(), &v), expected);
    }

    #[test]
    fn one_bad_queue_keeps_the_rest() {
        let text = br#"{"offsetTable":{"A@G":{0:1,1:1.5,2:3},"B@G":[],"C@G":{"7":9,4294967296:1}}}"#;
        let d = decode(text).expect("decodes");
        assert_eq!(d.table, vec![("A@G".into(), q(&[(0, 1), (2, 3)])), ("C@G".into(), q(&[(7, 9)]))]);
        let keys: Vec<_> = d.issues.iter().map(|i| i.key.clone().unwrap_or_default()).collect();
        assert_eq!(keys, ["A@G", "B@G", "C@G"]);
    }

    #[test]
    fn unreadable_strings_are_reported_not_fatal() {
        let mut text = br#"{"offsetTable":{"\uD800@G":{0:1},"X@G":{0:2}}}"#.to_vec();
        let d = decode(&text).expect("decodes");
        assert_eq!(d.table, vec![("X@G".into(), q(&[(0, 2)]))]);
        assert_eq!(d.issues.len(), 1);
        text[17] = 0xFF; // invalid UTF-8 inside the first key
        let d = decode(&text).expect("decodes");
        assert_eq!(d.table.len(), 1);
    }

    #[test]
    fn syntax_errors_are_fatal_with_position() {
        for text in ["", "{", "[]", r#"{"offsetTable":[]}"#, r#"{"offsetTable":{}} x"#, r#"{"a":{0:}}"#] {
            assert!(decode(text.as_bytes()).is_err(), "{text:?}");
        }
        let deep = "[".repeat(10_000);
        assert!(matches!(decode(deep.as_bytes()), Err(FormatError { .. })));
        let err = decode(br#"{"offsetTable":{"T@G":{0:1,}}}"#).expect_err("trailing comma");
        assert_eq!(err.position, 27);
    }

    #[test]
    fn salvage_keeps_entries_around_damage_and_before_a_tear() {
        let table: OffsetTable =
            (0..6).map(|i| (format!("T{i}@G"), q(&[(0, i64::from(i) * 10), (1, 7)]))).collect::<Vec<_>>();
        let text = encode(&broker(&table), &DataVersion { counter: 4, state_version: 0, timestamp: 9 }).into_bytes();
        let full = decode(&text).expect("decodes").table;
        // Torn in the middle of an entry: every entry before the tear survives.
        let cut = find(&text, b"\"T3@G\"", 0).expect("present") + 8;
        let d = salvage(&text[..cut]);
        assert!(decode(&text[..cut]).is_err());
        assert_eq!(d.version.counter, 4);
        let pos = full.iter().position(|(k, _)| k == "T3@G").expect("present");
        assert_eq!(d.table, full[..pos].to_vec());
        assert_eq!(d.issues.len(), 1);
        // Garbage inside one entry: only that entry is lost.
        let mut bad = text.clone();
        let at = find(&bad, b"\"T2@G\"", 0).expect("present");
        bad[at + 7..at + 11].copy_from_slice(b"\0\0\0\0");
        assert!(decode(&bad).is_err());
        let d = salvage(&bad);
        let kept: Vec<_> = full.iter().filter(|(k, _)| k != "T2@G").cloned().collect();
        assert_eq!(d.table, kept);
        assert_eq!(d.issues.len(), 1);
        // Nothing to go on.
        assert!(salvage(b"\xff\xfe").table.is_empty());
        assert_eq!(salvage(&text).table, full);
    }

    #[test]
    fn repeated_keys_keep_the_last_value_at_the_first_place() {
        let d = decode(br#"{"offsetTable":{"A@G":{0:1,0:2},"B@G":{},"A@G":{1:5}}}"#).expect("decodes");
        assert_eq!(d.table, vec![("A@G".into(), q(&[(1, 5)])), ("B@G".into(), q(&[]))]);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_salvage_without_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = decode(&bytes);
            let _ = salvage(&bytes);
        }

        #[test]
        fn flipped_bits_never_panic(flip in 0usize..400, bit in 0u8..8) {
            let table: OffsetTable = vec![("A@G".into(), q(&[(0, 5), (70, 1)])), ("B@G".into(), q(&[(2, -1)]))];
            let mut text = encode(&broker(&table), &DataVersion::default()).into_bytes();
            let i = flip % text.len();
            text[i] ^= 1 << bit;
            let d = decode(&text).unwrap_or_else(|_| salvage(&text));
            proptest::prop_assert!(d.table.len() <= 2);
        }

        #[test]
        fn tables_round_trip(entries in proptest::collection::vec(
            ("\\PC{1,8}", proptest::collection::btree_map(proptest::num::i32::ANY, proptest::num::i64::ANY, 0..5)),
            0..8,
        )) {
            let mut table: OffsetTable = Vec::new();
            for (key, queues) in entries {
                if !queues.is_empty() {
                    upsert(&mut table, key, queues.into_iter().collect());
                }
            }
            let text = encode(&broker(&table), &DataVersion { counter: 1, state_version: 2, timestamp: 3 });
            let d = decode(text.as_bytes()).expect("what encode writes, decode reads");
            proptest::prop_assert!(d.issues.is_empty());
            // The file holds the entries and each entry's queues in Java's map order.
            let sorted = |mut t: OffsetTable| {
                t.iter_mut().for_each(|(_, q)| q.sort_unstable());
                t.sort();
                t
            };
            proptest::prop_assert_eq!(sorted(d.table), sorted(table));
        }
    }

    #[test]
    fn escapes_round_trip() {
        let key = "\u{1}\u{7f}\"\\\u{8}\u{c}\r\t\n😀é\u{2028}\u{2029}@g".to_owned();
        let table: OffsetTable = vec![(key, q(&[(-5, i64::MIN), (i32::MAX, i64::MAX)]))];
        let text = encode(&broker(&table), &DataVersion::default());
        // As fastjson writes them (U+2028 and U+2029 checked against 5.3.1's ConsumerOffsetManager by hand).
        assert!(text.contains(r#"\u0001\u007F\"\\\b\f\r\t\n😀é\u2028\u2029@g"#), "{text}");
        let mut d = decode(text.as_bytes()).expect("decodes");
        d.table[0].1.sort();
        assert_eq!(d.table, table);
        assert!(d.issues.is_empty());
    }
}
