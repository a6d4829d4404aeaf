//! `config/topics.json`: the broker's topic configurations (spec §9.2, §9.4).
//!
//! The file is the text fastjson 1.2.83 writes for RocketMQ 5.3.1's `TopicConfigManager.encode(true)` (a
//! `TopicConfigSerializeWrapper`): bean properties in alphabetical order, tab indentation, one property a line,
//! maps in the iteration order of the broker's Java hash maps:
//!
//! ```text
//! {
//! \t"dataVersion":{
//! \t\t"counter":<long>,
//! \t\t"stateVersion":<long>,
//! \t\t"timestamp":<long>
//! \t},
//! \t"topicConfigTable":{                   (or {}, when there are no topics)
//! \t\t"<topic>":{                          ConcurrentHashMap(1024) order
//! \t\t\t"attributes":{},                   (or {\n\t\t\t\t"<k>":"<v>",...\n\t\t\t}, HashMap(16) order)
//! \t\t\t"order":<bool>,
//! \t\t\t"perm":<int>,
//! \t\t\t"readQueueNums":<int>,
//! \t\t\t"topicFilterType":"SINGLE_TAG"|"MULTI_TAG",
//! \t\t\t"topicName":"<topic>",
//! \t\t\t"topicSysFlag":<int>,
//! \t\t\t"writeQueueNums":<int>
//! \t\t},
//! \t}
//! }
//! ```
//!
//! RocketMQ 5.3.1 writes nothing else there (`getTopicMessageType` is not serialized; topic queue mappings live
//! in `topicQueueMapping.json`). [`TopicTable`] follows the broker's maps through every put and removal, so a
//! table built by the same history encodes to the same bytes: [`TopicTable::new`] is a `TopicConfigManager`
//! that loaded nothing (`new ConcurrentHashMap<>(1024)`), [`TopicTable::decoded`] one that loaded a file
//! (fastjson fills a `ConcurrentHashMap` in file order, and `decode` `putAll`s it into the table). Proven
//! against the real jars by `tests/test_topics.py`.
//!
//! Reading is strict: a document whose structure or fields are not what the broker writes is a
//! [`FormatError`] (the loader then falls back to `.bak`, as `ConfigManager.load` does). A missing field takes
//! `TopicConfig`'s Java default (16 queues, perm 6, `SINGLE_TAG`, 0, false, no attributes); unknown properties
//! are ignored, as fastjson ignores them.

use std::collections::HashMap;

use super::{as_long, describe, parse_document, quote, DataVersion, FormatError, Key, Value};
use crate::java::{ConcurrentHashMapOrder, HashMapOrder};

/// `TopicConfigManager.topicConfigTable` is `new ConcurrentHashMap<>(1024)`.
const TOPIC_TABLE_CAPACITY: usize = 1024;
/// `TopicConfig.attributes` is a `new HashMap<>()` (fastjson's too).
const ATTRIBUTES_CAPACITY: usize = 16;

/// `TopicConfig.defaultReadQueueNums` / `defaultWriteQueueNums`.
pub const DEFAULT_QUEUE_NUMS: i32 = 16;
/// `PermName.PERM_READ | PermName.PERM_WRITE`.
pub const DEFAULT_PERM: i32 = 6;
/// `TopicFilterType` names.
pub const FILTER_TYPES: [&str; 2] = ["SINGLE_TAG", "MULTI_TAG"];

/// One `TopicConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    /// `topicName`.
    pub name: String,
    /// `readQueueNums`: queues consumers are assigned.
    pub read_queue_nums: i32,
    /// `writeQueueNums`: queues producers write.
    pub write_queue_nums: i32,
    /// `perm`: `PermName` bits (2 write, 4 read, 1 inherit).
    pub perm: i32,
    /// `order`: an ordered topic.
    pub order: bool,
    /// `topicSysFlag`.
    pub sys_flag: i32,
    /// `topicFilterType`: one of [`FILTER_TYPES`].
    pub filter_type: String,
    /// `attributes`, in the order they were put.
    pub attributes: Vec<(String, String)>,
}

impl TopicConfig {
    /// `new TopicConfig(name)`: Java's defaults.
    pub fn new(name: &str) -> Self {
        TopicConfig {
            name: name.to_owned(),
            read_queue_nums: DEFAULT_QUEUE_NUMS,
            write_queue_nums: DEFAULT_QUEUE_NUMS,
            perm: DEFAULT_PERM,
            order: false,
            sys_flag: 0,
            filter_type: FILTER_TYPES[0].to_owned(),
            attributes: Vec::new(),
        }
    }
}

/// The topic table as `TopicConfigManager` holds it, so that it encodes to the broker's bytes.
#[derive(Debug, Clone)]
pub struct TopicTable {
    order: ConcurrentHashMapOrder<String>,
    entries: HashMap<String, TopicConfig>,
}

impl Default for TopicTable {
    fn default() -> Self {
        Self::new()
    }
}

impl TopicTable {
    /// The table of a `TopicConfigManager` that loaded nothing.
    pub fn new() -> Self {
        TopicTable { order: ConcurrentHashMapOrder::with_capacity(TOPIC_TABLE_CAPACITY), entries: HashMap::new() }
    }

    /// The table after `decode` of a file holding `topics` (in file order): fastjson's `ConcurrentHashMap` in
    /// file order, `putAll` into the manager's (presized for the count, as `putAll` does).
    pub fn decoded(topics: &[TopicConfig]) -> Self {
        let mut parsed: ConcurrentHashMapOrder<String> = ConcurrentHashMapOrder::new();
        let mut by_name = HashMap::new();
        for t in topics {
            parsed.put(t.name.clone());
            by_name.insert(t.name.clone(), t.clone());
        }
        let mut table = TopicTable {
            order: ConcurrentHashMapOrder::with_capacity(TOPIC_TABLE_CAPACITY.max(parsed.len())),
            entries: HashMap::new(),
        };
        for name in parsed.iter() {
            if let Some(t) = by_name.remove(name) {
                table.put(t);
            }
        }
        table
    }

    /// `putTopicConfig`: adds or replaces (in place) a topic.
    pub fn put(&mut self, config: TopicConfig) {
        self.order.put(config.name.clone());
        self.entries.insert(config.name.clone(), config);
    }

    /// `removeTopicConfig`: returns the removed config.
    pub fn remove(&mut self, name: &str) -> Option<TopicConfig> {
        let gone = self.entries.remove(name)?;
        self.order.remove(&name.to_owned());
        Some(gone)
    }

    /// One topic's config.
    pub fn get(&self, name: &str) -> Option<&TopicConfig> {
        self.entries.get(name)
    }

    /// Number of topics.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no topics.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The topics in the broker's order.
    pub fn in_order(&self) -> Vec<&TopicConfig> {
        self.order.iter().filter_map(|k| self.entries.get(k)).collect()
    }
}

/// `TopicConfigManager.encode(true)` of RocketMQ 5.3.1: the exact text `ConfigManager.persist` writes.
pub fn encode(table: &TopicTable, version: &DataVersion) -> String {
    let mut out = String::with_capacity(128 + table.len() * 256);
    out.push_str("{\n\t\"dataVersion\":{\n");
    out.push_str(&format!(
        "\t\t\"counter\":{},\n\t\t\"stateVersion\":{},\n\t\t\"timestamp\":{}\n\t}},\n",
        version.counter, version.state_version, version.timestamp
    ));
    let topics = table.in_order();
    if topics.is_empty() {
        out.push_str("\t\"topicConfigTable\":{}\n}");
        return out;
    }
    out.push_str("\t\"topicConfigTable\":{\n");
    for (n, t) in topics.iter().enumerate() {
        out.push_str("\t\t");
        quote(&mut out, &t.name);
        out.push_str(":{\n");
        encode_attributes(&mut out, &t.attributes);
        out.push_str(&format!(
            "\t\t\t\"order\":{},\n\t\t\t\"perm\":{},\n\t\t\t\"readQueueNums\":{},\n\t\t\t\"topicFilterType\":",
            t.order, t.perm, t.read_queue_nums
        ));
        quote(&mut out, &t.filter_type);
        out.push_str(",\n\t\t\t\"topicName\":");
        quote(&mut out, &t.name);
        out.push_str(&format!(
            ",\n\t\t\t\"topicSysFlag\":{},\n\t\t\t\"writeQueueNums\":{}\n\t\t}}",
            t.sys_flag, t.write_queue_nums
        ));
        out.push_str(if n + 1 < topics.len() { ",\n" } else { "\n" });
    }
    out.push_str("\t}\n}");
    out
}

/// `"attributes":{...},` in a `HashMap(16)`'s order.
fn encode_attributes(out: &mut String, attributes: &[(String, String)]) {
    if attributes.is_empty() {
        out.push_str("\t\t\t\"attributes\":{},\n");
        return;
    }
    let mut order: HashMapOrder<&str> = HashMapOrder::with_capacity(ATTRIBUTES_CAPACITY);
    let mut values: HashMap<&str, &str> = HashMap::new();
    for (k, v) in attributes {
        order.put(k.as_str());
        values.insert(k.as_str(), v.as_str());
    }
    out.push_str("\t\t\t\"attributes\":{\n");
    let keys: Vec<&str> = order.iter().copied().collect();
    for (n, k) in keys.iter().enumerate() {
        out.push_str("\t\t\t\t");
        quote(out, k);
        out.push(':');
        quote(out, values.get(k).copied().unwrap_or_default());
        out.push_str(if n + 1 < keys.len() { ",\n" } else { "\n" });
    }
    out.push_str("\t\t\t},\n");
}

/// What [`decode`] read: the topics in file order and the data version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decoded {
    /// Topics in file order (a repeated name keeps its last config at its first place).
    pub topics: Vec<TopicConfig>,
    /// The `dataVersion` (missing fields are 0).
    pub version: DataVersion,
}

fn fail<T>(reason: String) -> Result<T, FormatError> {
    Err(FormatError { position: 0, reason })
}

fn as_int(v: &Value, what: &str) -> Result<i32, FormatError> {
    let n = as_long(v).map_err(|why| FormatError { position: 0, reason: format!("{what}: {why}") })?;
    i32::try_from(n).or_else(|_| fail(format!("{what}: {n} is not a Java int")))
}

fn as_str(v: &Value, what: &str) -> Result<String, FormatError> {
    match v {
        Value::Str(Ok(s)) => Ok(s.clone()),
        Value::Str(Err(raw)) => fail(format!("{what}: {raw} is not readable")),
        other => fail(format!("{what} is {}, not a string", describe(other))),
    }
}

/// Reads `topics.json` (bytes as found on disk). See the module docs for what is refused.
pub fn decode(text: &[u8]) -> Result<Decoded, FormatError> {
    let members = parse_document(text)?;
    let mut out = Decoded::default();
    for (key, value) in members {
        match key.text().as_str() {
            "dataVersion" => read_version(&value, &mut out.version)?,
            "topicConfigTable" => match value {
                Value::Object(entries) => {
                    for (name, config) in entries {
                        let t = read_topic(&name, &config)?;
                        match out.topics.iter_mut().find(|x| x.name == t.name) {
                            Some(slot) => *slot = t,
                            None => out.topics.push(t),
                        }
                    }
                }
                Value::Null => {}
                other => return fail(format!("topicConfigTable is {}, not an object", describe(&other))),
            },
            _ => {}
        }
    }
    Ok(out)
}

fn read_version(value: &Value, version: &mut DataVersion) -> Result<(), FormatError> {
    let fields = match value {
        Value::Object(fields) => fields,
        Value::Null => return Ok(()),
        other => return fail(format!("dataVersion is {}, not an object", describe(other))),
    };
    for (k, v) in fields {
        let name = k.text();
        let slot = match name.as_str() {
            "counter" => &mut version.counter,
            "stateVersion" => &mut version.state_version,
            "timestamp" => &mut version.timestamp,
            _ => continue,
        };
        *slot = as_long(v).map_err(|why| FormatError { position: 0, reason: format!("dataVersion.{name}: {why}") })?;
    }
    Ok(())
}

fn read_topic(key: &Key, value: &Value) -> Result<TopicConfig, FormatError> {
    let name = match key {
        Key::Str(Ok(s)) => s.clone(),
        other => return fail(format!("topic key {} is not a readable string", other.text())),
    };
    let Value::Object(fields) = value else {
        return fail(format!("topic {name:?} is {}, not an object", describe(value)));
    };
    let mut t = TopicConfig::new(&name);
    for (k, v) in fields {
        let field = k.text();
        let what = format!("topic {name:?} {field}");
        match field.as_str() {
            "readQueueNums" => t.read_queue_nums = as_int(v, &what)?,
            "writeQueueNums" => t.write_queue_nums = as_int(v, &what)?,
            "perm" => t.perm = as_int(v, &what)?,
            "topicSysFlag" => t.sys_flag = as_int(v, &what)?,
            "order" => t.order = as_bool(v, &what)?,
            "topicName" => {
                let n = as_str(v, &what)?;
                if n != name {
                    return fail(format!("{what} {n:?} differs from its key"));
                }
            }
            "topicFilterType" => {
                let f = as_str(v, &what)?;
                if !FILTER_TYPES.contains(&f.as_str()) {
                    return fail(format!("{what}: {f:?} is not a TopicFilterType"));
                }
                t.filter_type = f;
            }
            "attributes" => match v {
                Value::Object(attrs) => {
                    for (ak, av) in attrs {
                        let ak = match ak {
                            Key::Str(Ok(s)) => s.clone(),
                            other => return fail(format!("{what}: key {} is not a string", other.text())),
                        };
                        let av = as_str(av, &what)?;
                        match t.attributes.iter_mut().find(|(k2, _)| *k2 == ak) {
                            Some(slot) => slot.1 = av,
                            None => t.attributes.push((ak, av)),
                        }
                    }
                }
                Value::Null => {}
                other => return fail(format!("{what} is {}, not an object", describe(other))),
            },
            _ => {}
        }
    }
    Ok(t)
}

fn as_bool(v: &Value, what: &str) -> Result<bool, FormatError> {
    match v {
        Value::Bool(b) => Ok(*b),
        other => fail(format!("{what} is {}, not a boolean", describe(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, read: i32, write: i32, attrs: &[(&str, &str)]) -> TopicConfig {
        let mut t = TopicConfig::new(name);
        t.read_queue_nums = read;
        t.write_queue_nums = write;
        t.attributes = attrs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        t
    }

    /// `TopicConfigManager.encode(true)` of RocketMQ 5.3.1 (tests/interop TopicsDriver `write`).
    const JAVA: &str = include_str!("../../tests/data/topics-rocketmq-5.3.1.json");

    #[test]
    fn rocketmq_531_file_reencodes_to_its_bytes() {
        let d = decode(JAVA.as_bytes()).expect("the Java file decodes");
        assert_eq!(d.topics.len(), 4);
        let orders = d.topics.iter().find(|t| t.name == "Orders").expect("present");
        assert_eq!((orders.read_queue_nums, orders.write_queue_nums, orders.order), (4, 2, true));
        assert_eq!(orders.attributes, vec![("+message.type".to_owned(), "FIFO".to_owned())]);
        assert_eq!(encode(&TopicTable::decoded(&d.topics), &d.version), JAVA);
        let mut fresh = TopicTable::new();
        for name in ["TopicTest", "Orders", "RO", "%RETRY%G"] {
            fresh.put(d.topics.iter().find(|t| t.name == name).expect("present").clone());
        }
        assert_eq!(encode(&fresh, &d.version), JAVA);
    }

    #[test]
    fn round_trips_and_keeps_order() {
        let mut table = TopicTable::new();
        for i in 0..40 {
            table.put(topic(&format!("T{i}"), i % 7 + 1, 3, if i % 3 == 0 { &[("a", "1"), ("+b", "x")] } else { &[] }));
        }
        table.remove("T5");
        let v = DataVersion { counter: 3, state_version: 0, timestamp: 7 };
        let text = encode(&table, &v);
        let d = decode(text.as_bytes()).expect("decodes");
        assert_eq!(d.version, v);
        assert_eq!(d.topics.len(), 39);
        let again = encode(&TopicTable::decoded(&d.topics), &d.version);
        assert_eq!(again, text);
    }

    #[test]
    fn empty_table() {
        let text = encode(&TopicTable::new(), &DataVersion::default());
        assert!(text.ends_with("\t\"topicConfigTable\":{}\n}"));
        assert!(decode(text.as_bytes()).expect("decodes").topics.is_empty());
    }

    #[test]
    fn bad_documents_are_refused() {
        for text in [
            "",
            "[]",
            r#"{"topicConfigTable":[]}"#,
            r#"{"topicConfigTable":{"T":{"perm":"6"}}}"#,
            r#"{"topicConfigTable":{"T":{"readQueueNums":4294967296}}}"#,
            r#"{"topicConfigTable":{"T":{"topicFilterType":"X"}}}"#,
            r#"{"topicConfigTable":{"T":{"topicName":"U"}}}"#,
            r#"{"topicConfigTable":{"T":{"order":1}}}"#,
        ] {
            assert!(decode(text.as_bytes()).is_err(), "{text:?}");
        }
        let d = decode(br#"{"topicConfigTable":{"T":{}}}"#).expect("defaults");
        assert_eq!(d.topics, vec![TopicConfig::new("T")]);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_without_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = decode(&bytes);
        }
    }
}
