//! Commitlog records as columns, for Arrow (the Spark data source and the Spark UDFs).
//!
//! Two ways in:
//! - [`split`]: the planner ([`plan_commitlog`]) walks each segment's record chain once and cuts it into splits
//!   that start at proven record starts; a [`SplitReader`] reads the records of one split, so a segment cut
//!   into several splits is read by several tasks with nothing lost, read twice or invented.
//! - [`ColumnBatch::push_record`] decodes records handed over one by one (a binary column of a DataFrame).

use std::net::SocketAddr;

use crate::java::{decode_utf8_lossy, split_java};
use crate::message::decode::{parse_header, RecordHeader};
use crate::message::ids::write_offset_msg_id;
use crate::message::properties::{self, keys};
use crate::message::{crc32, TransactionType};

pub mod split;
mod tail;
pub use split::{plan_commitlog, SegmentPlan, Skipped, SplitReader};

/// The columns, in schema order. The names are the DataFrame's column names.
pub const COLUMNS: [&str; 21] = [
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "store_size",
    "flag",
    "sys_flag",
    "transaction_type",
    "born_timestamp",
    "store_timestamp",
    "born_host",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
    "body",
    "properties",
    "tags",
    "keys",
    "uniq_key",
    "msg_id",
    "body_crc_ok",
];

/// Bit `i` selects `COLUMNS[i]`.
pub type ColumnMask = u32;

/// Every column.
pub const ALL_COLUMNS: ColumnMask = (1 << COLUMNS.len()) - 1;

/// The mask of the named columns; `None` names an unknown column.
pub fn mask_of<S: AsRef<str>>(names: &[S]) -> std::result::Result<ColumnMask, String> {
    let mut mask = 0;
    for n in names {
        let i = COLUMNS.iter().position(|c| *c == n.as_ref()).ok_or_else(|| n.as_ref().to_owned())?;
        mask |= 1 << i;
    }
    Ok(mask)
}

/// A variable-width column (Arrow string or binary): offsets, bytes and validity.
#[derive(Debug, Default, Clone)]
pub struct VarColumn {
    /// `rows + 1` offsets into `data`.
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
    /// One flag per row; empty while no row is null.
    pub valid: Vec<bool>,
}

impl VarColumn {
    fn new() -> Self {
        VarColumn { offsets: vec![0], data: Vec::new(), valid: Vec::new() }
    }
    fn rows(&self) -> usize {
        self.offsets.len() - 1
    }
    fn push(&mut self, bytes: &[u8]) {
        self.data.extend_from_slice(bytes);
        self.offsets.push(self.data.len() as i32);
        if !self.valid.is_empty() {
            self.valid.push(true);
        }
    }
    fn push_null(&mut self) {
        if self.valid.is_empty() {
            self.valid = vec![true; self.rows()];
        }
        self.offsets.push(self.data.len() as i32);
        self.valid.push(false);
    }
    /// Ends a row whose bytes were appended to `data` directly.
    fn end_row(&mut self) {
        self.offsets.push(self.data.len() as i32);
        if !self.valid.is_empty() {
            self.valid.push(true);
        }
    }
    /// Number of null rows.
    pub fn null_count(&self) -> usize {
        self.valid.iter().filter(|v| !**v).count()
    }
}

/// A list column (Arrow list of strings, or map of string to string when `values` is set).
#[derive(Debug, Default, Clone)]
pub struct ListColumn {
    /// `rows + 1` offsets into the child columns.
    pub offsets: Vec<i32>,
    pub keys: VarColumn,
    pub values: VarColumn,
}

impl ListColumn {
    fn new() -> Self {
        ListColumn { offsets: vec![0], keys: VarColumn::new(), values: VarColumn::new() }
    }
}

/// One column's values.
#[derive(Debug, Clone)]
pub enum Column {
    Int(Vec<i32>),
    Long(Vec<i64>),
    /// Microseconds since the epoch (Spark's timestamp unit).
    Micros(Vec<i64>),
    Bool(Vec<bool>),
    Str(VarColumn),
    Bin(VarColumn),
    /// array<string>: `keys` holds the elements.
    StrList(ListColumn),
    /// map<string,string>.
    StrMap(ListColumn),
    /// Not selected.
    Skipped,
}

/// What a column holds (the `COLUMNS` entry at the same index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Topic,
    QueueId,
    QueueOffset,
    CommitlogOffset,
    StoreSize,
    Flag,
    SysFlag,
    TransactionType,
    BornTimestamp,
    StoreTimestamp,
    BornHost,
    StoreHost,
    ReconsumeTimes,
    PreparedTransactionOffset,
    Body,
    Properties,
    Tags,
    Keys,
    UniqKey,
    MsgId,
    BodyCrcOk,
}

const KINDS: [Kind; 21] = [
    Kind::Topic,
    Kind::QueueId,
    Kind::QueueOffset,
    Kind::CommitlogOffset,
    Kind::StoreSize,
    Kind::Flag,
    Kind::SysFlag,
    Kind::TransactionType,
    Kind::BornTimestamp,
    Kind::StoreTimestamp,
    Kind::BornHost,
    Kind::StoreHost,
    Kind::ReconsumeTimes,
    Kind::PreparedTransactionOffset,
    Kind::Body,
    Kind::Properties,
    Kind::Tags,
    Kind::Keys,
    Kind::UniqKey,
    Kind::MsgId,
    Kind::BodyCrcOk,
];

type Span = std::ops::Range<usize>;

/// Rows decoded into columns. `valid` marks rows that are null as a whole (a UDF input that was null or not a
/// record); it stays empty while every row is valid.
#[derive(Debug, Clone)]
pub struct ColumnBatch {
    pub rows: usize,
    pub columns: Vec<Column>,
    pub valid: Vec<bool>,
    bytes: usize,
    /// The selected columns: (index, kind).
    selected: Vec<(usize, Kind)>,
    /// Whether a row needs a pass over its properties (tags, keys, uniq_key or the map).
    needs_props: bool,
    /// Reused per row: the accepted properties as (name, value) spans of the blob, duplicates collapsed.
    scratch: Vec<(Span, Span)>,
}

fn column_for(kind: Kind) -> Column {
    match kind {
        Kind::QueueId | Kind::StoreSize | Kind::Flag | Kind::SysFlag | Kind::ReconsumeTimes => Column::Int(Vec::new()),
        Kind::QueueOffset | Kind::CommitlogOffset | Kind::PreparedTransactionOffset => Column::Long(Vec::new()),
        Kind::BornTimestamp | Kind::StoreTimestamp => Column::Micros(Vec::new()),
        Kind::BodyCrcOk => Column::Bool(Vec::new()),
        Kind::Body => Column::Bin(VarColumn::new()),
        Kind::Keys => Column::StrList(ListColumn::new()),
        Kind::Properties => Column::StrMap(ListColumn::new()),
        _ => Column::Str(VarColumn::new()),
    }
}

fn transaction_name(t: TransactionType) -> &'static str {
    match t {
        TransactionType::NotType => "NOT_TYPE",
        TransactionType::Prepared => "PREPARED",
        TransactionType::Commit => "COMMIT",
        TransactionType::Rollback => "ROLLBACK",
    }
}

/// Text as Java decodes it (valid UTF-8 is pushed as is, without a copy to a String).
fn push_text(col: &mut VarColumn, bytes: &[u8]) {
    col.push(decode_utf8_lossy(bytes).as_bytes());
}

fn push_decimal(out: &mut Vec<u8>, mut v: u32) {
    let mut digits = [0u8; 10];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// `ip:port` or `[ipv6]:port`, as `SocketAddr`'s Display writes it (IPv4 without the formatting machinery).
fn push_host(col: &mut VarColumn, addr: SocketAddr) {
    match addr {
        SocketAddr::V4(a) => {
            for (i, o) in a.ip().octets().iter().enumerate() {
                if i > 0 {
                    col.data.push(b'.');
                }
                push_decimal(&mut col.data, u32::from(*o));
            }
            col.data.push(b':');
            push_decimal(&mut col.data, u32::from(a.port()));
        }
        SocketAddr::V6(_) => {
            use std::io::Write;
            let _ = write!(col.data, "{addr}");
        }
    }
    col.end_row();
}

/// The span of `part` (a subslice of `blob`) inside `blob`.
fn span_in(blob: &[u8], part: &[u8]) -> Span {
    let start = part.as_ptr() as usize - blob.as_ptr() as usize;
    start..start + part.len()
}

impl ColumnBatch {
    /// An empty batch of the selected columns.
    pub fn new(mask: ColumnMask) -> Self {
        let selected: Vec<(usize, Kind)> =
            KINDS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(i, k)| (i, *k)).collect();
        let columns = KINDS
            .iter()
            .enumerate()
            .map(|(i, k)| if mask & (1 << i) != 0 { column_for(*k) } else { Column::Skipped })
            .collect();
        let needs_props =
            selected.iter().any(|(_, k)| matches!(k, Kind::Properties | Kind::Tags | Kind::Keys | Kind::UniqKey));
        ColumnBatch { rows: 0, columns, valid: Vec::new(), bytes: 0, selected, needs_props, scratch: Vec::new() }
    }

    /// Bytes of variable-width data held (bodies, strings), to cap a batch below Arrow's 2 GiB offsets.
    pub fn data_bytes(&self) -> usize {
        self.bytes
    }

    /// Appends one decoded record (`record` = its bytes, `h` = its parsed header).
    pub fn push_record(&mut self, record: &[u8], h: &RecordHeader) {
        let blob = h.properties(record);
        // One pass over the properties: the accepted entries in stored order, a later duplicate replacing the
        // value in the first one's position (as `properties::parse` and Java's map), and the three we index.
        let (mut tags, mut keys_text, mut uniq) = (None, None, None);
        self.scratch.clear();
        if self.needs_props {
            for (n, v) in properties::iter_raw(blob) {
                match n {
                    b"TAGS" => tags = Some(v),
                    b"KEYS" => keys_text = Some(v),
                    b"UNIQ_KEY" => uniq = Some(v),
                    _ => {}
                }
                let (ns, vs) = (span_in(blob, n), span_in(blob, v));
                match self.scratch.iter_mut().find(|(s, _)| blob.get(s.clone()) == Some(n)) {
                    Some(slot) => slot.1 = vs,
                    None => self.scratch.push((ns, vs)),
                }
            }
        }
        for &(i, kind) in &self.selected {
            match (&mut self.columns[i], kind) {
                (Column::Int(v), Kind::QueueId) => v.push(h.queue_id),
                (Column::Int(v), Kind::StoreSize) => v.push(h.total_size),
                (Column::Int(v), Kind::Flag) => v.push(h.flag),
                (Column::Int(v), Kind::SysFlag) => v.push(h.sys_flag),
                (Column::Int(v), _) => v.push(h.reconsume_times),
                (Column::Long(v), Kind::QueueOffset) => v.push(h.queue_offset),
                (Column::Long(v), Kind::CommitlogOffset) => v.push(h.physical_offset),
                (Column::Long(v), _) => v.push(h.prepared_transaction_offset),
                (Column::Micros(v), Kind::BornTimestamp) => v.push(h.born_timestamp.saturating_mul(1000)),
                (Column::Micros(v), _) => v.push(h.store_timestamp.saturating_mul(1000)),
                (Column::Bool(v), _) => v.push(crc32(h.body(record)) == h.body_crc),
                (Column::Bin(v), _) => v.push(h.body(record)),
                (Column::Str(v), Kind::Topic) => push_text(v, h.topic(record)),
                (Column::Str(v), Kind::TransactionType) => v.push(transaction_name(h.transaction_type()).as_bytes()),
                (Column::Str(v), Kind::BornHost) => push_host(v, h.born_host),
                (Column::Str(v), Kind::StoreHost) => push_host(v, h.store_host),
                (Column::Str(v), Kind::MsgId) => {
                    write_offset_msg_id(&mut v.data, h.store_host, h.physical_offset);
                    v.end_row();
                }
                (Column::Str(v), kind) => match if kind == Kind::Tags { tags } else { uniq } {
                    Some(s) => push_text(v, s),
                    None => v.push_null(),
                },
                (Column::StrList(l), _) => {
                    let text = keys_text.map(decode_utf8_lossy).unwrap_or_default();
                    if !text.is_empty() {
                        for k in split_java(&text, keys::KEY_SEPARATOR) {
                            l.keys.push(k.as_bytes());
                        }
                    }
                    l.offsets.push(l.keys.rows() as i32);
                }
                (Column::StrMap(m), _) => {
                    for (n, v) in &self.scratch {
                        push_text(&mut m.keys, blob.get(n.clone()).unwrap_or_default());
                        push_text(&mut m.values, blob.get(v.clone()).unwrap_or_default());
                    }
                    m.offsets.push(m.keys.rows() as i32);
                }
                (Column::Skipped, _) => {}
            }
        }
        if !self.valid.is_empty() {
            self.valid.push(true);
        }
        self.rows += 1;
        self.bytes += record.len();
    }

    /// Appends a row that is null as a whole (every column gets a placeholder value).
    pub fn push_null(&mut self) {
        if self.valid.is_empty() {
            self.valid = vec![true; self.rows];
        }
        for col in self.columns.iter_mut() {
            match col {
                Column::Skipped => {}
                Column::Int(v) => v.push(0),
                Column::Long(v) | Column::Micros(v) => v.push(0),
                Column::Bool(v) => v.push(false),
                Column::Str(v) | Column::Bin(v) => v.push(b""),
                Column::StrList(l) | Column::StrMap(l) => l.offsets.push(l.keys.rows() as i32),
            }
        }
        self.valid.push(false);
        self.rows += 1;
    }
}

/// Record filters a split reader applies before decoding (exact: a row is skipped only if it cannot match).
#[derive(Debug, Clone, Default)]
pub struct RecordFilter {
    /// Keep only these topics (as decoded strings); `None` keeps all.
    pub topics: Option<Vec<String>>,
    /// Keep only store timestamps (ms) at or after this.
    pub min_store_ms: Option<i64>,
    /// Keep only store timestamps (ms) at or before this.
    pub max_store_ms: Option<i64>,
}

impl RecordFilter {
    fn keeps(&self, record: &[u8], h: &RecordHeader) -> bool {
        if self.min_store_ms.is_some_and(|m| h.store_timestamp < m)
            || self.max_store_ms.is_some_and(|m| h.store_timestamp > m)
        {
            return false;
        }
        match &self.topics {
            None => true,
            Some(ts) => {
                let topic = decode_utf8_lossy(h.topic(record));
                ts.iter().any(|t| *t == topic)
            }
        }
    }
}

/// Decodes records handed over as whole byte strings (`None` = a null input row). A row that is not exactly one
/// valid record becomes a null row, or, with `strict`, an error naming the row.
pub fn decode_records<'a>(
    records: impl IntoIterator<Item = Option<&'a [u8]>>,
    mask: ColumnMask,
    strict: bool,
) -> std::result::Result<ColumnBatch, (usize, String)> {
    let mut batch = ColumnBatch::new(mask);
    for (row, rec) in records.into_iter().enumerate() {
        let Some(rec) = rec else {
            batch.push_null();
            continue;
        };
        match parse_header(rec) {
            Ok(h) if h.total_size as usize == rec.len() => batch.push_record(rec, &h),
            Ok(h) => {
                if strict {
                    return Err((row, format!("{} bytes hold a {}-byte record and more", rec.len(), h.total_size)));
                }
                batch.push_null();
            }
            Err(e) => {
                if strict {
                    return Err((row, e.to_string()));
                }
                batch.push_null();
            }
        }
    }
    Ok(batch)
}
