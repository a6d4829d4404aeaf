//! `<root>/checkpoint` (spec §8.1): created as 4096 zero bytes, written on flush and close with the store
//! time of the last dispatched message and the end time of the last rolled index file, never moving
//! backwards, and keeping the fields rmq does not own as it found them.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use rmq::checkpoint::CHECKPOINT_FILE_SIZE;
use rmq::store::{MessageStore, PutMessage};

mod common;
use common::small_config;

fn read_longs(root: &Path) -> [i64; 5] {
    let bytes = std::fs::read(root.join("checkpoint")).unwrap();
    assert_eq!(bytes.len() as u64, CHECKPOINT_FILE_SIZE);
    assert!(bytes[40..].iter().all(|&b| b == 0));
    let mut out = [0i64; 5];
    for (i, v) in out.iter_mut().enumerate() {
        *v = i64::from_be_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
    }
    out
}

fn put_keyed(store: &MessageStore, n: usize) -> i64 {
    let mut last = 0;
    for i in 0..n {
        let key = format!("key-{i}");
        let mut m = PutMessage::new("T", 0, b"body");
        m.keys = Some(&key);
        last = store.put(&m).unwrap().store_timestamp;
    }
    last
}

#[test]
fn a_new_store_gets_a_zero_checkpoint_and_close_records_the_last_message() {
    let tmp = tempfile::tempdir().unwrap();
    let store = MessageStore::open(tmp.path(), small_config()).unwrap();
    assert_eq!(read_longs(tmp.path()), [0; 5]);
    let last = put_keyed(&store, 3);
    store.close().unwrap();
    let [physic, logics, index, master, confirm] = read_longs(tmp.path());
    assert_eq!((physic, logics), (last, last));
    assert_eq!((index, master, confirm), (0, 0, 0)); // no index file was filled
}

#[test]
fn flush_records_what_is_dispatched_and_rolled_index_files() {
    let tmp = tempfile::tempdir().unwrap();
    let store = MessageStore::open(tmp.path(), small_config()).unwrap();
    // 16 entries per index file; each message puts UNIQ_KEY and one key: 40 messages roll several files.
    let last = put_keyed(&store, 40);
    while store.dispatch(u64::MAX, false).unwrap().records > 0 {}
    store.flush().unwrap();
    let files = store.index().unwrap().files();
    assert!(files.len() >= 3);
    let rolled_end = files[files.len() - 2].end_timestamp();
    assert_eq!(store.checkpoint().index_msg_timestamp, rolled_end);
    let [physic, logics, index, _, _] = read_longs(tmp.path());
    assert_eq!((physic, logics, index), (last, last, rolled_end));
    store.close().unwrap();
}

#[test]
fn values_never_lie_after_the_newest_record_and_foreign_fields_are_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bytes = vec![0u8; CHECKPOINT_FILE_SIZE as usize];
    let future = i64::MAX / 2;
    for (i, v) in [future, 5, 0, 777, 888].iter().enumerate() {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
    }
    std::fs::write(tmp.path().join("checkpoint"), &bytes).unwrap();
    let store = MessageStore::open(tmp.path(), small_config()).unwrap();
    // Times after every record the log holds (none here) come back to it at open (a store whose log was cut,
    // or copied from a machine whose clock ran ahead): the next crash's recovery must not start too late.
    assert_eq!(read_longs(tmp.path()), [0, 0, 0, 777, 888]);
    let last = put_keyed(&store, 2);
    store.close().unwrap();
    // Both move up to the last message; HA fields untouched.
    assert_eq!(read_longs(tmp.path()), [last, last, 0, 777, 888]);
    // Reopening and closing without new messages changes nothing.
    MessageStore::open(tmp.path(), small_config()).unwrap().close().unwrap();
    assert_eq!(read_longs(tmp.path()), [last, last, 0, 777, 888]);
}

#[test]
fn a_short_checkpoint_file_is_extended_to_4096_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("checkpoint"), [0u8; 10]).unwrap();
    MessageStore::open(tmp.path(), small_config()).unwrap().close().unwrap();
    assert_eq!(read_longs(tmp.path()), [0; 5]);
}
