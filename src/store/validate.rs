//! Pre-put checks (spec §11.1 and §11.2). They run before anything is written or any queue offset is taken.

use crate::error::{Error, Result};
use crate::message::properties::{check_property, keys};
use crate::message::sysflag;

/// Longest topic in UTF-16 chars (`TopicValidator`), except retry and DLQ topics.
pub const TOPIC_MAX_LEN: usize = 127;
/// Longest `%RETRY%` / `%DLQ%` topic.
pub const RETRY_TOPIC_MAX_LEN: usize = 255;
/// Prefix of consumer-group retry topics.
pub const RETRY_PREFIX: &str = "%RETRY%";
/// Prefix of dead-letter topics.
pub const DLQ_PREFIX: &str = "%DLQ%";

/// `TopicValidator.isSystemTopic`.
pub fn is_system_topic(topic: &str) -> bool {
    const SYSTEM: [&str; 10] = [
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    ];
    SYSTEM.contains(&topic) || topic.starts_with("rmq_sys_")
}

/// Topics producers may not send to directly (`TopicValidator.isNotAllowedSendTopic`).
pub fn is_not_allowed_send_topic(topic: &str) -> bool {
    const NOT_ALLOWED: [&str; 6] = [
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    ];
    NOT_ALLOWED.contains(&topic)
}

/// The topic rules for producers: [`check_topic_name`], and not one of the topics producers may not send to.
pub fn check_topic(topic: &str) -> Result<()> {
    check_topic_name(topic)?;
    if is_not_allowed_send_topic(topic) {
        return Err(Error::InvalidTopic {
            topic: topic.to_owned(),
            reason: "this system topic does not accept messages from producers".into(),
        });
    }
    Ok(())
}

/// The rules every stored topic follows, system topics included: not blank, only `[%|a-zA-Z0-9_-]` (so never
/// a path), at most 127 chars (255 for retry and DLQ topics).
pub fn check_topic_name(topic: &str) -> Result<()> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-');
    // Every put checks its topic: the common case (allowed bytes, within the shorter limit) in one pass.
    if !topic.is_empty() && topic.len() <= TOPIC_MAX_LEN && topic.bytes().all(allowed) {
        return Ok(());
    }
    let bad = |reason: String| Err(Error::InvalidTopic { topic: topic.to_owned(), reason });
    if topic.trim().is_empty() {
        return bad("the topic is blank".into());
    }
    if let Some(c) = topic.chars().find(|&c| !u8::try_from(c).is_ok_and(allowed)) {
        return bad(format!("character {c:?} is not allowed; topics may only use [%|a-zA-Z0-9_-]"));
    }
    let retry = topic.starts_with(RETRY_PREFIX) || topic.starts_with(DLQ_PREFIX);
    let limit = if retry { RETRY_TOPIC_MAX_LEN } else { TOPIC_MAX_LEN };
    if topic.len() > limit {
        return bad(format!("{} characters, the limit is {limit}", topic.len()));
    }
    Ok(())
}

/// SYSFLAG bits a producer may set: compression flag and type, multi-tags. Transaction bits come from the
/// transaction type; host bits from the addresses; batch bits are not supported on this path.
pub const PRODUCER_SYS_FLAGS: i32 = sysflag::COMPRESSED | sysflag::MULTI_TAGS | sysflag::COMPRESSION_TYPE_MASK;

/// Checks the producer-side fields of one message.
pub fn check_message_fields(sys_flag: i32, queue_id: i32, reconsume_times: i32, prepared_offset: i64) -> Result<()> {
    if sys_flag & !PRODUCER_SYS_FLAGS != 0 {
        return Err(Error::IllegalMessage(format!(
            "sys_flag 0x{sys_flag:X} sets bits other than compression (0x1, 0x700) and multi-tags (0x2); \
             pass the transaction type separately"
        )));
    }
    if (sys_flag & sysflag::COMPRESSION_TYPE_MASK) >> 8 > 3 {
        return Err(Error::IllegalMessage(format!("compression type {} is not 0..3", (sys_flag & 0x700) >> 8)));
    }
    if queue_id < 0 {
        return Err(Error::IllegalMessage(format!("queue id {queue_id} is negative")));
    }
    if reconsume_times < 0 {
        return Err(Error::IllegalMessage(format!("reconsume_times {reconsume_times} is negative")));
    }
    if prepared_offset < 0 {
        return Err(Error::IllegalMessage(format!("prepared_transaction_offset {prepared_offset} is negative")));
    }
    Ok(())
}

/// Checks user properties and the tags and keys text.
pub fn check_properties(tags: Option<&str>, keys_text: Option<&str>, props: &[(&str, &str)]) -> Result<()> {
    if let Some(t) = tags {
        check_property(keys::TAGS, t)?;
    }
    if let Some(k) = keys_text {
        check_property(keys::KEYS, k)?;
    }
    for (name, value) in props {
        check_property(name, value)?;
        let dup = |what: &str| {
            Err(Error::InvalidProperty {
                name: (*name).to_owned(),
                reason: format!("given both as {what} and as a property"),
            })
        };
        match *name {
            keys::TAGS if tags.is_some() => return dup("tags"),
            keys::KEYS if keys_text.is_some() => return dup("keys"),
            keys::INNER_NUM | keys::INNER_BASE => {
                return Err(Error::InvalidProperty {
                    name: (*name).to_owned(),
                    reason: "inner-batch properties need a BatchConsumeQueue topic, which this store does not offer"
                        .into(),
                })
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics() {
        assert!(check_topic("TopicTest").is_ok());
        assert!(check_topic("a|b%c-d_e").is_ok());
        for bad in ["", " ", "../x", "a/b", "a\0b", "a b", "标签", "SCHEDULE_TOPIC_XXXX"] {
            assert!(matches!(check_topic(bad), Err(Error::InvalidTopic { .. })), "{bad:?}");
        }
        assert!(check_topic(&"a".repeat(127)).is_ok());
        assert!(check_topic(&"a".repeat(128)).is_err());
        let retry = format!("%RETRY%{}", "a".repeat(248));
        assert_eq!(retry.len(), 255);
        assert!(check_topic(&retry).is_ok());
        assert!(check_topic(&format!("{retry}a")).is_err());
        assert!(is_system_topic("rmq_sys_wheel_timer"));
        assert!(is_system_topic("TBW102"));
        assert!(!is_system_topic("TopicTest"));
    }

    proptest::proptest! {
        /// The one-pass check accepts exactly what the rules accept (short and long names, retry prefixes,
        /// blanks, bytes around the allowed set, multi-byte chars).
        #[test]
        fn topic_names_follow_the_rules(topic in "(%RETRY%|%DLQ%)?[a-zA-Z0-9%|_ ./\t\\-é]{0,300}") {
            let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-');
            let limit = if topic.starts_with(RETRY_PREFIX) || topic.starts_with(DLQ_PREFIX) { 255 } else { 127 };
            let rules = !topic.is_empty() && topic.chars().all(allowed) && topic.len() <= limit;
            proptest::prop_assert_eq!(check_topic_name(&topic).is_ok(), rules);
        }
    }
}
