//! The client's local offset store, `<dir>/<clientId>/<group>/offsets.json`: where a broadcasting consumer
//! (`LocalFileOffsetStore`) keeps its own offsets. The text is fastjson 1.2.83's pretty print of
//! `OffsetSerializeWrapper`, a `ConcurrentHashMap<MessageQueue, AtomicLong>`; its keys are beans, which fastjson
//! writes as objects (so the file is not strict JSON):
//!
//! ```text
//! {
//! \t"offsetTable":{{                      (or {}, when there are no entries)
//! \t\t\t"brokerName":"<broker>",
//! \t\t\t"queueId":<int>,
//! \t\t\t"topic":"<topic>"
//! \t\t}:<offset>,{
//! \t\t\t...
//! \t\t}:<offset>
//! \t}
//! }
//! ```
//!
//! The entries come in the iteration order of a `new ConcurrentHashMap<>()` (16 bins) keyed by
//! `MessageQueue.hashCode()`, fed as `persistAll` feeds it ([`encode`] takes that history). Strings are escaped
//! as in `consumerOffset.json`. The reader is tolerant per entry, as [`super::decode`] is.

use super::{as_long, describe, parse_document, quote, FormatError, Issue, Key, Value};
use crate::java::{string_hash, ConcurrentHashMapOrder, JavaHash};

/// One queue's offset in the client's table (`MessageQueue` → offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalEntry {
    /// The queue's topic.
    pub topic: String,
    /// The queue's broker.
    pub broker_name: String,
    /// The queue id.
    pub queue_id: i32,
    /// The next queue offset to consume.
    pub offset: i64,
}

/// What [`decode`] found: the good entries in file order and what was left out.
#[derive(Debug, Default)]
pub struct DecodedLocal {
    /// Entries in file order (a repeated queue keeps its first position and its last offset).
    pub entries: Vec<LocalEntry>,
    /// Entries left out, and why.
    pub issues: Vec<Issue>,
}

/// `MessageQueue` as a Java map key: `hashCode()` and `compareTo` as RocketMQ defines them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mq<'a> {
    topic: &'a str,
    broker_name: &'a str,
    queue_id: i32,
}

impl JavaHash for Mq<'_> {
    fn java_hash(&self) -> i32 {
        // MessageQueue.hashCode: 31-based over brokerName, queueId, topic, starting from 1.
        let mut h: i32 = 1;
        h = h.wrapping_mul(31).wrapping_add(string_hash(self.broker_name));
        h = h.wrapping_mul(31).wrapping_add(self.queue_id);
        h.wrapping_mul(31).wrapping_add(string_hash(self.topic))
    }
    fn java_cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.topic
            .encode_utf16()
            .cmp(other.topic.encode_utf16())
            .then_with(|| self.broker_name.encode_utf16().cmp(other.broker_name.encode_utf16()))
            .then_with(|| self.queue_id.cmp(&other.queue_id))
    }
}

/// The map key of an entry.
fn key(e: &LocalEntry) -> Mq<'_> {
    Mq { topic: &e.topic, broker_name: &e.broker_name, queue_id: e.queue_id }
}

/// The text `LocalFileOffsetStore.persistAll` writes: it reads the file (`persisted`, in file order) into a new
/// map, puts the store's own table into it (`memory`, in the order the store put its queues: those it loaded
/// first, then those it committed), iterating its table as Java iterates its `ConcurrentHashMap`, and prints the
/// map. A queue takes its last offset from `memory` (else from `persisted`).
pub fn encode(persisted: &[LocalEntry], memory: &[LocalEntry]) -> String {
    let mut table = ConcurrentHashMapOrder::new();
    for e in memory {
        table.put(key(e));
    }
    let mut order = ConcurrentHashMapOrder::new();
    for e in persisted {
        order.put(key(e));
    }
    for mq in table.iter() {
        order.put(mq.clone());
    }
    let offset_of = |mq: &Mq<'_>| {
        let last = |entries: &[LocalEntry]| entries.iter().rev().find(|e| key(e) == *mq).map(|e| e.offset);
        last(memory).or_else(|| last(persisted)).unwrap_or(0)
    };
    // Format: { "offsetTable":{ {brokerName, queueId, topic}:offset, ... } }, tab-indented.
    let mut out = String::from("{\n");
    if order.is_empty() {
        out.push_str("\t\"offsetTable\":{}\n}");
        return out;
    }
    out.push_str("\t\"offsetTable\":{");
    for (n, mq) in order.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str("{\n\t\t\t\"brokerName\":");
        quote(&mut out, mq.broker_name);
        out.push_str(&format!(",\n\t\t\t\"queueId\":{},\n\t\t\t\"topic\":", mq.queue_id));
        quote(&mut out, mq.topic);
        out.push_str(&format!("\n\t\t}}:{}", offset_of(mq)));
    }
    out.push_str("\n\t}\n}");
    out
}

/// The `MessageQueue` bean of a key: `brokerName`, `queueId` and `topic` (other properties ignored).
fn queue_of(fields: &[(Key, Value)]) -> Result<(String, String, i32), String> {
    let (mut topic, mut broker, mut queue_id) = (None, None, None);
    for (k, v) in fields {
        let Key::Str(Ok(name)) = k else { continue };
        match (name.as_str(), v) {
            ("topic", Value::Str(Ok(s))) => topic = Some(s.clone()),
            ("brokerName", Value::Str(Ok(s))) => broker = Some(s.clone()),
            ("queueId", Value::Number(n)) => {
                queue_id = Some(crate::java::parse_int(n).ok_or_else(|| format!("queueId {n} is not a Java int"))?)
            }
            ("topic" | "brokerName" | "queueId", other) => return Err(format!("{name} is {}", describe(other))),
            _ => {}
        }
    }
    match (topic, broker, queue_id) {
        (Some(t), Some(b), Some(q)) => Ok((t, b, q)),
        _ => Err("the queue lacks topic, brokerName or queueId".into()),
    }
}

/// Reads `offsets.json`. Refuses (with the byte position) only a document that is not JSON with object keys
/// or whose `offsetTable` is not an object; an entry whose queue or offset is unreadable is left out and
/// reported.
pub fn decode(text: &[u8]) -> Result<DecodedLocal, FormatError> {
    let members = parse_document(text)?;
    let mut out = DecodedLocal::default();
    for (key, value) in members {
        if !matches!(&key, Key::Str(Ok(name)) if name == "offsetTable") {
            continue;
        }
        let entries = match value {
            Value::Object(entries) => entries,
            Value::Null => continue,
            other => {
                let reason = format!("offsetTable is {}, not an object", describe(&other));
                return Err(FormatError { position: 0, reason });
            }
        };
        for (k, v) in entries {
            let Key::Object(fields) = k else {
                out.issues.push(Issue { key: Some(k.text()), reason: "key is not a queue; entry left out".into() });
                continue;
            };
            match (queue_of(&fields), as_long(&v)) {
                (Ok((topic, broker_name, queue_id)), Ok(offset)) => {
                    let e = LocalEntry { topic, broker_name, queue_id, offset };
                    let same = |x: &&mut LocalEntry| {
                        (&x.topic, &x.broker_name, x.queue_id) == (&e.topic, &e.broker_name, e.queue_id)
                    };
                    match out.entries.iter_mut().find(same) {
                        Some(slot) => slot.offset = e.offset,
                        None => out.entries.push(e),
                    }
                }
                (Err(why), _) | (_, Err(why)) => {
                    out.issues.push(Issue { key: None, reason: format!("{why}; entry left out") });
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(topic: &str, q: i32, offset: i64) -> LocalEntry {
        LocalEntry { topic: topic.into(), broker_name: "broker-a".into(), queue_id: q, offset }
    }

    /// What RocketMQ 5.3.1's client wrote for these three puts (`OffsetSerializeWrapper.toJson(true)`).
    const JAVA: &str = "{\n\t\"offsetTable\":{{\n\t\t\t\"brokerName\":\"broker-a\",\n\t\t\t\"queueId\":0,\n\t\t\t\
        \"topic\":\"%RETRY%G\"\n\t\t}:0,{\n\t\t\t\"brokerName\":\"broker-a\",\n\t\t\t\"queueId\":1,\n\t\t\t\
        \"topic\":\"Orders\"\n\t\t}:7,{\n\t\t\t\"brokerName\":\"broker-a\",\n\t\t\t\"queueId\":0,\n\t\t\t\
        \"topic\":\"Orders\"\n\t\t}:12\n\t}\n}";

    #[test]
    fn encodes_the_java_bytes_and_reads_them_back() {
        let puts = [e("Orders", 0, 12), e("Orders", 1, 7), e("%RETRY%G", 0, 0)];
        assert_eq!(encode(&[], &puts), JAVA);
        let back = decode(JAVA.as_bytes()).expect("decodes");
        assert!(back.issues.is_empty());
        let mut sorted = back.entries.clone();
        sorted.sort_by_key(|x| (x.topic.clone(), x.queue_id));
        assert_eq!(sorted, vec![e("%RETRY%G", 0, 0), e("Orders", 0, 12), e("Orders", 1, 7)]);
        assert_eq!(encode(&back.entries, &[]), JAVA, "re-encoding the file order gives the same bytes");
        assert_eq!(encode(&back.entries, &back.entries), JAVA, "a store that loaded the file writes it back");
    }

    #[test]
    fn empty_table_and_bad_entries() {
        assert_eq!(encode(&[], &[]), "{\n\t\"offsetTable\":{}\n}");
        assert!(decode(b"{\"offsetTable\":{}}").expect("decodes").entries.is_empty());
        let text = b"{\"offsetTable\":{{\"brokerName\":\"b\",\"queueId\":1,\"topic\":\"T\"}:5,\
            {\"brokerName\":\"b\",\"queueId\":\"x\",\"topic\":\"T\"}:6,{\"topic\":\"T\"}:7,\"k\":8,\
            {\"brokerName\":\"b\",\"queueId\":2,\"topic\":\"T\"}:\"nine\"}}";
        let d = decode(text).expect("decodes");
        assert_eq!(d.entries, vec![LocalEntry { topic: "T".into(), broker_name: "b".into(), queue_id: 1, offset: 5 }]);
        assert_eq!(d.issues.len(), 4, "{:?}", d.issues);
        assert!(decode(b"{\"offsetTable\":[]}").is_err());
        assert!(decode(b"{\"offsetTable\":{").is_err());
    }
}
