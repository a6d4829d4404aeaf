//! Commitlog records as columns, for Arrow (the Spark data source and the Spark UDFs).
//!
//! Two ways in:
//! - [`SplitReader`] reads the records that *start* inside a byte range `[start, end)` of one segment file, so a
//!   segment cut into several splits is read by several tasks with nothing lost or read twice. A split that
//!   starts mid-segment finds its first record with [`find_boundary`].
//! - [`ColumnBatch::push_record`] decodes records handed over one by one (a binary column of a DataFrame).
//!
//! Files are read with positioned reads into a window, not mapped: a split reader may run against a store a
//! broker is still writing, and a read never faults.
//!
//! Record boundaries. A record stores its own commitlog offset (PHYSICALOFFSET). A position `p` in the segment
//! starting at offset `base` is taken as a record start only if the bytes there parse as a record whose sizes
//! add up (`calMsgLength`) *and* whose PHYSICALOFFSET is `base + p`, and the record after it does the same (or
//! is the end-of-file blank, or the end of the data). Bytes inside a body would have to contain a well-formed
//! record naming the very offset they were written at, followed by another: a message cannot know its offset
//! before it is stored, so no body can. The body CRC is deliberately not required, so that a record with a
//! damaged body is still found (and reported with `body_crc_ok = false`), exactly as the record walk reads it.

use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::java::{decode_utf8_lossy, split_java};
use crate::message::decode::{check_record, parse_header, CheckOptions, RecordCheck, RecordHeader};
use crate::message::ids::write_offset_msg_id;
use crate::message::properties::{self, keys};
use crate::message::{crc32, TransactionType};

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

/// A growable read window over one file (positioned reads; nothing mapped).
struct Window {
    file: File,
    path: PathBuf,
    file_len: u64,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    at: u64,
}

const CHUNK: usize = 8 << 20;
/// Bytes examined per step of the boundary search (a boundary is normally found within one record).
const SCAN_CHUNK: usize = 64 << 10;

impl Window {
    fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        Ok(Window { file, path: path.to_owned(), file_len, buf: Vec::new(), at: 0 })
    }

    /// The bytes from `pos` to at least `pos + len` (fewer at the end of the file), reading as needed.
    fn get(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
        let want_end = pos.saturating_add(len as u64).min(self.file_len);
        let have_end = self.at + self.buf.len() as u64;
        if pos < self.at || want_end > have_end {
            let read_len = (want_end - pos).max(CHUNK as u64).min(self.file_len.saturating_sub(pos)) as usize;
            if pos >= self.at && pos < have_end {
                // Keep the overlap, read only what follows it.
                self.buf.drain(..(pos - self.at) as usize);
            } else {
                self.buf.clear();
            }
            self.at = pos;
            let from = self.buf.len();
            self.buf.resize(read_len, 0);
            let mut done = from;
            while done < read_len {
                match self.file.read_at(&mut self.buf[done..], pos + done as u64) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::io(&self.path, e)),
                }
            }
            self.buf.truncate(done);
        }
        let start = (pos - self.at) as usize;
        Ok(&self.buf[start.min(self.buf.len())..])
    }
}

/// What is at `pos` of a segment starting at offset `base`, read through `w`, looking at most `limit` bytes.
enum At {
    Record(RecordHeader, usize),
    Blank,
    /// No record: the end of the written data, or damage.
    Nothing,
}

fn read_at(w: &mut Window, base: i64, pos: u64, limit: u64) -> Result<At> {
    if pos + 8 > limit {
        return Ok(At::Nothing);
    }
    let head = w.get(pos, 8)?;
    let Some(total) = head.get(..4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]])) else {
        return Ok(At::Nothing);
    };
    let size = u64::try_from(total).unwrap_or(0).min(limit - pos) as usize;
    let bytes = w.get(pos, size.max(8))?;
    let bytes = &bytes[..bytes.len().min((limit - pos) as usize)];
    Ok(match check_record(bytes, CheckOptions::default()) {
        RecordCheck::Message(h) if h.physical_offset == base + pos as i64 => {
            let n = h.total_size as usize;
            At::Record(h, n)
        }
        RecordCheck::Blank { .. } => At::Blank,
        _ => At::Nothing,
    })
}

/// The first record start at or after `from` in the segment starting at offset `base`, looking below `limit`
/// (the end of the segment's data). See the module docs for why the test is sound.
pub fn find_boundary(path: &Path, base: i64, from: u64, limit: u64) -> Result<Option<u64>> {
    let mut w = Window::open(path)?;
    find_in(&mut w, base, from, limit)
}

fn find_in(w: &mut Window, base: i64, from: u64, limit: u64) -> Result<Option<u64>> {
    let (v1, v2) = (crate::message::MAGIC_V1.to_be_bytes(), crate::message::MAGIC_V2.to_be_bytes());
    let mut p = from;
    while p + 8 <= limit {
        // Scan a chunk for the magic code (4 bytes after a record start), then test each candidate fully.
        let chunk = {
            let c = w.get(p, SCAN_CHUNK)?;
            c[..c.len().min(SCAN_CHUNK)].to_vec()
        };
        let n = chunk.len().min((limit - p) as usize);
        if n < 8 {
            break;
        }
        let mut i = 0;
        while i + 8 <= n {
            let m = &chunk[i + 4..i + 8];
            if m == v1 || m == v2 {
                let cand = p + i as u64;
                if let At::Record(_, size) = read_at(w, base, cand, limit)? {
                    match read_at(w, base, cand + size as u64, limit)? {
                        At::Record(..) | At::Blank => return Ok(Some(cand)),
                        At::Nothing => {
                            // The data may end right after this record: nothing more than zeros follow.
                            let next = cand + size as u64;
                            if next + 8 > limit || w.get(next, 8)?.iter().take(8).all(|b| *b == 0) {
                                return Ok(Some(cand));
                            }
                        }
                    }
                }
            }
            i += 1;
        }
        // Continue with an overlap of 7 bytes so no candidate straddling the chunk end is missed.
        p += (n - 7) as u64;
    }
    Ok(None)
}

/// Where the written data of a segment ends: the walk from its start stops at the blank filler (the segment is
/// full: its length is returned) or at the first position holding no record (the end of the data, as recovery
/// finds it).
pub fn segment_data_end(path: &Path, base: i64) -> Result<u64> {
    let mut w = Window::open(path)?;
    let len = w.file_len;
    let mut pos = 0u64;
    loop {
        match read_at(&mut w, base, pos, len)? {
            At::Record(_, size) => pos += size as u64,
            At::Blank => return Ok(len),
            At::Nothing => return Ok(pos),
        }
    }
}

/// Reads the records that start in `[start, end)` of one segment, in batches.
pub struct SplitReader {
    w: Window,
    base: i64,
    pos: u64,
    end: u64,
    limit: u64,
    mask: ColumnMask,
    filter: RecordFilter,
    done: bool,
}

impl SplitReader {
    /// `path` is a segment whose first byte is commitlog offset `base`; `limit` is where its data ends
    /// ([`segment_data_end`], or the file length for a full segment).
    pub fn open(
        path: &Path,
        base: i64,
        start: u64,
        end: u64,
        limit: u64,
        mask: ColumnMask,
        filter: RecordFilter,
    ) -> Result<Self> {
        let mut w = Window::open(path)?;
        let limit = limit.min(w.file_len);
        let end = end.min(limit);
        let (pos, done) = if start == 0 {
            (0, start >= end)
        } else if start >= end {
            (start, true)
        } else {
            match find_in(&mut w, base, start, limit)? {
                Some(p) => (p, p >= end),
                None => (start, true),
            }
        };
        Ok(SplitReader { w, base, pos, end, limit, mask, filter, done })
    }

    /// The next batch of at most `max_rows` rows and about `max_bytes` of data, or `None` at the end of the split.
    pub fn next_batch(&mut self, max_rows: usize, max_bytes: usize) -> Result<Option<ColumnBatch>> {
        let mut batch = ColumnBatch::new(self.mask);
        while !self.done && batch.rows < max_rows.max(1) && batch.data_bytes() < max_bytes {
            if self.pos >= self.end {
                self.done = true;
                break;
            }
            let pos = self.pos;
            match read_at(&mut self.w, self.base, pos, self.limit)? {
                At::Record(h, size) => {
                    // `read_at` parsed the whole record from this window: the bytes are there.
                    let Some(record) = self.w.get(pos, size)?.get(..size) else {
                        return Err(self.damage(pos));
                    };
                    if self.filter.keeps(record, &h) {
                        batch.push_record(record, &h);
                    }
                    self.pos += size as u64;
                }
                At::Blank => self.done = true,
                At::Nothing => {
                    return Err(self.damage(pos));
                }
            }
        }
        if batch.rows == 0 && self.done {
            return Ok(None);
        }
        Ok(Some(batch))
    }

    fn damage(&mut self, pos: u64) -> Error {
        let bytes = self.w.get(pos, 64 << 10).map(<[u8]>::to_vec).unwrap_or_default();
        let reason = match parse_header(&bytes) {
            Ok(h) => format!(
                "the record there names commitlog offset {} instead of its own; split reading needs records at \
                 their own offsets (read this store with a split size of at least the segment size)",
                h.physical_offset
            ),
            Err(e) => format!("no record inside the written data: {e}"),
        };
        Error::Corruption { path: self.w.path.clone(), offset: self.base + pos as i64, reason }
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
