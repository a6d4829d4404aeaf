//! Store configuration: RocketMQ's `MessageStoreConfig` / `BrokerConfig` setting names (in snake case)
//! and defaults, grouped by subsystem. Only settings that change behaviour in rmq are here.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// When a put counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushDiskType {
    /// The put returns once the record is in the page cache; data is flushed by `flush()` and on close.
    /// Survives a process crash, not a power loss. RocketMQ's default.
    AsyncFlush,
    /// The put returns after the written range is flushed to disk (msync).
    SyncFlush,
}

/// Commitlog settings (`MessageStoreConfig`).
#[derive(Debug, Clone)]
pub struct CommitLogConfig {
    /// `mappedFileSizeCommitLog`: bytes per segment file. Default 1 073 741 824 (1 GiB).
    pub mapped_file_size_commit_log: u64,
    /// `maxMessageSize`: largest body in bytes; the whole record may be 64 KiB larger. Default 4 194 304.
    pub max_message_size: i32,
    /// `enabledAppendPropCRC`: append a `__CRC32#` property holding a CRC of the whole record. Default false.
    pub enabled_append_prop_crc: bool,
    /// `forceVerifyPropCRC`: on recovery verify the property CRC instead of the body CRC. Default false.
    pub force_verify_prop_crc: bool,
    /// `autoMessageVersionOnTopicLen`: write v2 records (2-byte topic length) for topics over 127 chars. Default true.
    pub auto_message_version_on_topic_len: bool,
    /// `checkCRCOnRecover`: verify body CRCs while finding the end of the log on open. Default true.
    pub check_crc_on_recover: bool,
    /// `flushDiskType`. Default `AsyncFlush`.
    pub flush_disk_type: FlushDiskType,
}

impl Default for CommitLogConfig {
    fn default() -> Self {
        CommitLogConfig {
            mapped_file_size_commit_log: 1024 * 1024 * 1024,
            max_message_size: 4 * 1024 * 1024,
            enabled_append_prop_crc: false,
            force_verify_prop_crc: false,
            auto_message_version_on_topic_len: true,
            check_crc_on_recover: true,
            flush_disk_type: FlushDiskType::AsyncFlush,
        }
    }
}

/// Broker identity written into records (`BrokerConfig`).
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `brokerIP1:listenPort`: the store host of every record (and of offsetMsgId). Default 127.0.0.1:10911.
    pub store_host: SocketAddr,
    /// `brokerClusterName`: stored as the `CLUSTER` property of single puts, as a broker does.
    /// `None` leaves the property out. Default "DefaultCluster".
    pub broker_cluster_name: Option<String>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            broker_cluster_name: Some("DefaultCluster".to_owned()),
        }
    }
}

/// Consume-queue settings.
#[derive(Debug, Clone)]
pub struct ConsumeQueueConfig {
    /// `mappedFileSizeConsumeQueue`: bytes per consume-queue file, rounded up to a multiple of 20.
    /// Default 6 000 000 (300 000 entries).
    pub mapped_file_size_consume_queue: u64,
}

impl Default for ConsumeQueueConfig {
    fn default() -> Self {
        ConsumeQueueConfig { mapped_file_size_consume_queue: crate::consume_queue::DEFAULT_FILE_SIZE }
    }
}

/// `brokerRole`: what the store serves as. Only the read path looks at it (`nextOffsetCorrection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerRole {
    /// A master that acknowledges before replication. RocketMQ's default.
    AsyncMaster,
    /// A master that acknowledges after replication.
    SyncMaster,
    /// A replica: error statuses of `getMessage` never move the client's offset (unless `offset_check_in_slave`).
    Slave,
}

/// Read-path settings (`getMessage`, spec §13).
#[derive(Debug, Clone)]
pub struct ReadConfig {
    /// `maxTransferBytesOnMessageInMemory`: byte cap of one pull when the data is hot. Default 262 144.
    pub max_transfer_bytes_on_message_in_memory: u64,
    /// `maxTransferCountOnMessageInMemory`: message cap of one pull when the data is hot. Default 32.
    pub max_transfer_count_on_message_in_memory: u64,
    /// `maxTransferBytesOnMessageInDisk`: byte cap of one pull when the data is cold. Default 65 536.
    pub max_transfer_bytes_on_message_in_disk: u64,
    /// `maxTransferCountOnMessageInDisk`: message cap of one pull when the data is cold. Default 8.
    pub max_transfer_count_on_message_in_disk: u64,
    /// `accessMessageInMemoryMaxRatio`: data within this percentage of physical memory from the end of the
    /// commitlog counts as hot. Default 40.
    pub access_message_in_memory_max_ratio: u32,
    /// `maxFilterMessageSize`: consume-queue bytes one pull may scan past its offset (at least 20 × max
    /// messages). Default 16 000.
    pub max_filter_message_size: u64,
    /// `travelCqFileNumWhenGetMessage`: consume-queue files one pull may scan while nothing matched. Default 1.
    pub travel_cq_file_num_when_get_message: u32,
    /// `brokerRole`. Default `AsyncMaster`.
    pub broker_role: BrokerRole,
    /// `offsetCheckInSlave`: let a slave correct offsets too. Default false.
    pub offset_check_in_slave: bool,
}

impl Default for ReadConfig {
    fn default() -> Self {
        ReadConfig {
            max_transfer_bytes_on_message_in_memory: 256 * 1024,
            max_transfer_count_on_message_in_memory: 32,
            max_transfer_bytes_on_message_in_disk: 64 * 1024,
            max_transfer_count_on_message_in_disk: 8,
            access_message_in_memory_max_ratio: 40,
            max_filter_message_size: 16_000,
            travel_cq_file_num_when_get_message: 1,
            broker_role: BrokerRole::AsyncMaster,
            offset_check_in_slave: false,
        }
    }
}

/// Expired-file cleanup settings (`MessageStoreConfig`; spec §14).
#[derive(Debug, Clone)]
pub struct CleanConfig {
    /// `fileReservedTime`: hours a commitlog segment is kept after its last modification. Default 72.
    pub file_reserved_time: i32,
    /// `deleteWhen`: `;`-separated local hours (0-23) at which expired segments are deleted. Default "04".
    pub delete_when: String,
    /// `diskMaxUsedSpaceRatio`: percent of the disk in use above which expired segments are deleted at any
    /// hour (clamped to 10..=95). Default 75.
    pub disk_max_used_space_ratio: i32,
    /// `diskSpaceWarningLevelRatio`: percent in use above which puts are refused (SERVICE_NOT_AVAILABLE)
    /// and segments are deleted at once, expired or not (clamped to 35..=90). Default 90.
    pub disk_space_warning_level_ratio: i32,
    /// `diskSpaceCleanForciblyRatio`: percent in use above which segments are deleted at once, expired or
    /// not (clamped to 30..=85). Default 85.
    pub disk_space_clean_forcibly_ratio: i32,
    /// `cleanFileForciblyEnable`: let the two ratios above delete segments that have not expired. Default true.
    pub clean_file_forcibly_enable: bool,
    /// `deleteCommitLogFilesInterval`: pause in ms between two deleted segments. Default 100.
    pub delete_commit_log_files_interval: u64,
    /// `deleteConsumeQueueFilesInterval`: pause in ms after a consume queue that deleted files. Default 100.
    pub delete_consume_queue_files_interval: u64,
    /// `destroyMapedFileIntervalForcibly`: how long RocketMQ waits for readers of a deleted file (ms). rmq
    /// unlinks at once and a reader's mapping lives on until it is dropped, so nothing waits. Default 120 000.
    pub destroy_mapped_file_interval_forcibly: u64,
    /// `deleteFileBatchMax`: most segments deleted per run. Default 10.
    pub delete_file_batch_max: u32,
    /// `cleanResourceInterval`: ms between two cleanup runs. Default 10 000.
    pub clean_resource_interval: u64,
    /// `redeleteHangedFileInterval`: RocketMQ's retry of a file whose destroy waited on readers (ms). rmq never
    /// leaves such a file behind. Default 120 000.
    pub redelete_hanged_file_interval: u64,
    /// Delay in ms before the first cleanup run after the store opens (RocketMQ's fixed 60 s). Default 60 000.
    pub clean_service_initial_delay: u64,
}

impl Default for CleanConfig {
    fn default() -> Self {
        CleanConfig {
            file_reserved_time: 72,
            delete_when: "04".to_owned(),
            disk_max_used_space_ratio: 75,
            disk_space_warning_level_ratio: 90,
            disk_space_clean_forcibly_ratio: 85,
            clean_file_forcibly_enable: true,
            delete_commit_log_files_interval: 100,
            delete_consume_queue_files_interval: 100,
            destroy_mapped_file_interval_forcibly: 120_000,
            delete_file_batch_max: 10,
            clean_resource_interval: 10_000,
            redelete_hanged_file_interval: 120_000,
            clean_service_initial_delay: 60_000,
        }
    }
}

impl CleanConfig {
    /// `deleteWhen`'s hours (`UtilAll.isItTimeToDo` parses each with `Integer.parseInt`).
    pub fn delete_hours(&self) -> Result<Vec<i32>> {
        self.delete_when
            .split(';')
            .map(|w| {
                w.parse::<i32>().map_err(|_| {
                    Error::InvalidConfig(format!(
                        "delete_when must be hours separated by ';' (e.g. \"04\" or \"04;16\"), got {:?}",
                        self.delete_when
                    ))
                })
            })
            .collect()
    }

    /// The warning ratio as a fraction, clamped as `getDiskSpaceWarningLevelRatio` clamps it: [0.35, 0.90].
    pub fn warning_ratio(&self) -> f64 {
        (f64::from(self.disk_space_warning_level_ratio) / 100.0).clamp(0.35, 0.90)
    }

    /// The forced-cleaning ratio as a fraction, clamped as `getDiskSpaceCleanForciblyRatio`: [0.30, 0.85].
    pub fn forcibly_ratio(&self) -> f64 {
        (f64::from(self.disk_space_clean_forcibly_ratio) / 100.0).clamp(0.30, 0.85)
    }

    /// The max-used ratio as a fraction, clamped as `getDiskMaxUsedSpaceRatio`: [10, 95] percent.
    pub fn max_used_ratio(&self) -> f64 {
        f64::from(self.disk_max_used_space_ratio.clamp(10, 95)) / 100.0
    }

    /// The reserved time in ms (`fileReservedTime * 60 * 60 * 1000`, in Java's long arithmetic).
    pub fn reserved_ms(&self) -> i64 {
        i64::from(self.file_reserved_time) * 3_600_000
    }

    fn validate(&self) -> Result<()> {
        self.delete_hours()?;
        if self.file_reserved_time < 0 {
            return Err(Error::InvalidConfig(format!(
                "file_reserved_time must be 0 or more hours, got {}",
                self.file_reserved_time
            )));
        }
        if self.clean_resource_interval == 0 {
            return Err(Error::InvalidConfig("clean_resource_interval must be at least 1 ms".into()));
        }
        Ok(())
    }
}

/// The whole configuration of a store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Commitlog settings.
    pub commit_log: CommitLogConfig,
    /// Broker identity.
    pub broker: BrokerConfig,
    /// Consume-queue settings.
    pub consume_queue: ConsumeQueueConfig,
    /// Index file sizes (`maxHashSlotNum`, `maxIndexNum`) and the query cap (`maxMsgsNumBatch`).
    pub index: crate::index::IndexConfig,
    /// `messageIndexEnable`: build the key index. Default true.
    pub message_index_enable: bool,
    /// `messageDelayLevel`: delay levels of `SCHEDULE_TOPIC_XXXX` (their tagsCode is the delivery time).
    pub message_delay_level: String,
    /// Read-path (`getMessage`) settings.
    pub read: ReadConfig,
    /// Expired-file cleanup (`CleanCommitLogService`, `CleanConsumeQueueService`).
    pub clean: CleanConfig,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            commit_log: CommitLogConfig::default(),
            broker: BrokerConfig::default(),
            consume_queue: ConsumeQueueConfig::default(),
            index: crate::index::IndexConfig::default(),
            message_index_enable: true,
            message_delay_level: crate::message::tags::DEFAULT_DELAY_LEVELS.to_owned(),
            read: ReadConfig::default(),
            clean: CleanConfig::default(),
        }
    }
}

/// Smallest segment accepted: large enough for a minimal record plus the end-of-file blank.
pub const MIN_SEGMENT_SIZE: u64 = 64;

impl StoreConfig {
    /// Checks ranges; called when a store opens.
    pub fn validate(&self) -> Result<()> {
        let c = &self.commit_log;
        if c.mapped_file_size_commit_log < MIN_SEGMENT_SIZE || c.mapped_file_size_commit_log > i32::MAX as u64 {
            return Err(Error::InvalidConfig(format!(
                "mapped_file_size_commit_log must be between {MIN_SEGMENT_SIZE} and {} bytes, got {}",
                i32::MAX,
                c.mapped_file_size_commit_log
            )));
        }
        if c.max_message_size < 10 {
            return Err(Error::InvalidConfig(format!(
                "max_message_size must be at least 10 bytes, got {}",
                c.max_message_size
            )));
        }
        let cq = self.consume_queue.mapped_file_size_consume_queue;
        if !(20..=i32::MAX as u64).contains(&cq) {
            return Err(Error::InvalidConfig(format!(
                "mapped_file_size_consume_queue must be between 20 and {} bytes, got {cq}",
                i32::MAX
            )));
        }
        self.index.validate()?;
        self.clean.validate()?;
        if let Some(name) = &self.broker.broker_cluster_name {
            crate::message::properties::check_property(crate::message::properties::keys::CLUSTER, name)?;
        }
        Ok(())
    }
}

/// The file sizes of an existing store, read off its files (the settings a store must be opened with).
/// `None`: no file to read that size from (a new store, or a directory without such files).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileSizes {
    /// `mappedFileSizeCommitLog`, from `commitlog/`.
    pub mapped_file_size_commit_log: Option<u64>,
    /// `mappedFileSizeConsumeQueue`, from `consumequeue/<topic>/<queueId>/`.
    pub mapped_file_size_consume_queue: Option<u64>,
    /// `(maxHashSlotNum, maxIndexNum)`, from `index/`.
    pub index: Option<(u32, u32)>,
}

impl FileSizes {
    /// Reads the sizes off the files under `root`, writing nothing and opening no file but index headers.
    ///
    /// - A directory of segments named by their start offset (the commitlog, each consume queue): the distance
    ///   between consecutive names, where a directory has two files or more (the most common distance, so a
    ///   missing segment does not count); otherwise the most common length of its files. A truncated or
    ///   extended segment therefore does not decide the size: opening then reports it as damage.
    /// - Index files (`40 + 4 × slots + 20 × entries` bytes): a full file (any but the newest) has
    ///   `indexCount = maxIndexNum` in its header, which fixes both; with only the newest file, RocketMQ's
    ///   default ratio (entries = 4 × slots) when the length fits it, else (files up to 64 MiB) the one layout
    ///   under which the file's slots and chains are what `putKey` writes. When neither tells,
    ///   [`Error::InvalidConfig`]: the sizes must then be given.
    pub fn read(root: &Path) -> Result<Self> {
        let mut sizes = FileSizes::default();
        let commitlog = segments(&root.join("commitlog"))?;
        sizes.mapped_file_size_commit_log = segment_size(&[commitlog]);
        let cq_root = root.join("consumequeue");
        let mut queues = Vec::new();
        for topic in subdirs(&cq_root)? {
            for queue in subdirs(&topic)? {
                queues.push(segments(&queue)?);
            }
        }
        sizes.mapped_file_size_consume_queue = segment_size(&queues);
        sizes.index = index_sizes(&root.join("index"))?;
        Ok(sizes)
    }

    /// Sets the sizes found in `config`, leaving the others as they are.
    pub fn apply(&self, config: &mut StoreConfig) {
        if let Some(s) = self.mapped_file_size_commit_log {
            config.commit_log.mapped_file_size_commit_log = s;
        }
        if let Some(s) = self.mapped_file_size_consume_queue {
            config.consume_queue.mapped_file_size_consume_queue = s;
        }
        if let Some((slots, entries)) = self.index {
            config.index.max_hash_slot_num = slots;
            config.index.max_index_num = entries;
        }
    }
}

impl StoreConfig {
    /// The default configuration with the file sizes of the store at `root` ([`FileSizes::read`]): what
    /// opening a store without a configuration uses.
    pub fn from_files(root: &Path) -> Result<Self> {
        let mut config = StoreConfig::default();
        FileSizes::read(root)?.apply(&mut config);
        Ok(config)
    }
}

/// The sub-directories of `dir` (none if it does not exist).
fn subdirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in read_dir(dir)? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if entry.file_type().map_err(|e| Error::io(entry.path(), e))?.is_dir() {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// `std::fs::read_dir`, with a missing directory read as empty.
fn read_dir(dir: &Path) -> Result<impl Iterator<Item = std::io::Result<std::fs::DirEntry>>> {
    match std::fs::read_dir(dir) {
        Ok(it) => Ok(Some(it).into_iter().flatten()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None.into_iter().flatten()),
        Err(e) => Err(Error::io(dir, e)),
    }
}

/// (start offset, length) of the non-empty files of `dir` named by their start offset, in offset order.
fn segments(dir: &Path) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    for entry in read_dir(dir)? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let Some(start) = entry.file_name().to_str().and_then(crate::file_queue::parse_file_name) else { continue };
        let meta = entry.metadata().map_err(|e| Error::io(entry.path(), e))?;
        if meta.is_file() && meta.len() > 0 {
            out.push((start, meta.len()));
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The segment size of one or more segment directories of the same setting (module docs of
/// [`FileSizes::read`]): name distances where there are any, else file lengths; the most common, ties to the
/// larger.
fn segment_size(dirs: &[Vec<(u64, u64)>]) -> Option<u64> {
    let distances: Vec<u64> =
        dirs.iter().flat_map(|d| d.windows(2).filter_map(|w| w[1].0.checked_sub(w[0].0))).filter(|&d| d > 0).collect();
    if !distances.is_empty() {
        return most_common(&distances);
    }
    most_common(&dirs.iter().flatten().map(|&(_, len)| len).collect::<Vec<_>>())
}

fn most_common(values: &[u64]) -> Option<u64> {
    let mut counts = std::collections::BTreeMap::<u64, usize>::new();
    for &v in values {
        *counts.entry(v).or_default() += 1;
    }
    counts.into_iter().max_by_key(|&(v, n)| (n, v)).map(|(v, _)| v)
}

/// `(maxHashSlotNum, maxIndexNum)` of the index files in `dir` (see [`FileSizes::read`]).
fn index_sizes(dir: &Path) -> Result<Option<(u32, u32)>> {
    use crate::index::{HEADER_SIZE, INDEX_COUNT_POS, SLOT_SIZE};
    let mut files = Vec::new();
    for entry in read_dir(dir)? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let meta = entry.metadata().map_err(|e| Error::io(entry.path(), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if meta.is_file() && meta.len() > 0 && !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) {
            files.push((name, entry.path(), meta.len()));
        }
    }
    files.sort();
    let Some(len) = most_common(&files.iter().map(|f| f.2).collect::<Vec<_>>()) else { return Ok(None) };
    let slot = SLOT_SIZE as u64;
    let entry = crate::index::ENTRY_SIZE as u64;
    let body = len.saturating_sub(HEADER_SIZE as u64);
    // Full files: every file but the newest, with the common length.
    for (_, path, _) in files.iter().rev().skip(1).filter(|f| f.2 == len) {
        let mut head = [0u8; HEADER_SIZE];
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut head, 0).map_err(|e| Error::io(path, e))?;
        let count = u64::from(u32::from_be_bytes([
            head[INDEX_COUNT_POS],
            head[INDEX_COUNT_POS + 1],
            head[INDEX_COUNT_POS + 2],
            head[INDEX_COUNT_POS + 3],
        ]));
        let slots_bytes = body.checked_sub(count * entry).filter(|b| *b > 0 && b.is_multiple_of(slot));
        if let (Some(b), true) = (slots_bytes, count >= 2) {
            if let (Ok(slots), Ok(entries)) = (u32::try_from(b / slot), u32::try_from(count)) {
                return Ok(Some((slots, entries)));
            }
        }
    }
    // Only the newest file (or no readable full one): RocketMQ's default ratio, entries = 4 × slots.
    let per_slot = slot + 4 * entry;
    if body > 0 && body.is_multiple_of(per_slot) {
        if let Ok(slots) = u32::try_from(body / per_slot) {
            if let Some(entries) = slots.checked_mul(4) {
                return Ok(Some((slots, entries)));
            }
        }
    }
    // Another ratio and only the newest file: the sizes whose layout its slots and chains fit.
    if let Some((_, path, _)) = files.iter().rev().find(|f| f.2 == len).filter(|_| len <= SMALL_INDEX_FILE) {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        if let [only] = index_layouts_that_fit(&bytes)[..] {
            return Ok(Some(only));
        }
    }
    let path = files.iter().find(|f| f.2 == len).map(|f| f.1.display().to_string()).unwrap_or_default();
    Err(Error::InvalidConfig(format!(
        "cannot tell the index sizes from {path} ({len} bytes, not RocketMQ's ratio of 4 entries per slot and no full \
         index file to read them from): give max_hash_slot_num and max_index_num (40 + 4 × slots + 20 × entries \
         = {len})"
    )))
}

/// Index files up to this size are read whole to find their layout when their header cannot tell it.
const SMALL_INDEX_FILE: u64 = 64 << 20;

/// Every `(slots, entries)` with `40 + 4 × slots + 20 × entries = bytes.len()` under which the index file's
/// used entries (1 to indexCount − 1) form what `putKey` writes: each entry's `prevIndex` is 0 or an earlier
/// entry of the same slot, and each entry's slot holds it or a later entry. A file without entries fits any.
fn index_layouts_that_fit(bytes: &[u8]) -> Vec<(u32, u32)> {
    use crate::index::{ENTRY_SIZE, HEADER_SIZE, INDEX_COUNT_POS, SLOT_SIZE};
    let be = |pos: usize| -> Option<i32> { Some(i32::from_be_bytes(bytes.get(pos..pos + 4)?.try_into().ok()?)) };
    let Some(used) = be(INDEX_COUNT_POS).and_then(|n| usize::try_from(n).ok()).filter(|n| *n >= 2) else {
        return Vec::new();
    };
    let body = bytes.len().saturating_sub(HEADER_SIZE);
    let mut fits = Vec::new();
    for entries in used..=body / ENTRY_SIZE {
        let slot_bytes = body - entries * ENTRY_SIZE;
        if slot_bytes == 0 || !slot_bytes.is_multiple_of(SLOT_SIZE) {
            continue;
        }
        let slots = slot_bytes / SLOT_SIZE;
        let entry = |i: usize| HEADER_SIZE + slot_bytes + i * ENTRY_SIZE;
        let slot_of = |i: usize| be(entry(i)).map(|h| h.unsigned_abs() as usize % slots);
        let fits_entry = |i: usize| -> Option<bool> {
            let slot = slot_of(i)?;
            let newest = usize::try_from(be(HEADER_SIZE + slot * SLOT_SIZE)?).ok()?;
            let prev = usize::try_from(be(entry(i) + 16)?).ok()?;
            Some(newest >= i && newest < used && prev < i && (prev == 0 || slot_of(prev)? == slot))
        };
        if (1..used).all(|i| fits_entry(i) == Some(true)) {
            if let (Ok(s), Ok(e)) = (u32::try_from(slots), u32::try_from(entries)) {
                fits.push((s, e));
            }
        }
    }
    fits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file_queue::file_name;

    fn file(dir: &Path, name: &str, len: u64) {
        std::fs::create_dir_all(dir).expect("mkdir");
        std::fs::File::create(dir.join(name)).and_then(|f| f.set_len(len)).expect("create");
    }

    fn index_file(dir: &Path, name: &str, slots: u64, entries: u64, index_count: i32) {
        file(dir, name, 40 + 4 * slots + 20 * entries);
        let f = std::fs::OpenOptions::new().write(true).open(dir.join(name)).expect("open");
        std::os::unix::fs::FileExt::write_all_at(&f, &index_count.to_be_bytes(), 36).expect("write");
    }

    #[test]
    fn segment_sizes_come_from_name_spacing_so_a_damaged_file_does_not_decide() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cl = tmp.path().join("commitlog");
        let mib = 1 << 20;
        file(&cl, &file_name(0), mib);
        file(&cl, &file_name(mib), mib);
        file(&cl, &file_name(2 * mib), 1000); // truncated last segment
        let cq = tmp.path().join("consumequeue");
        file(&cq.join("T/0"), &file_name(0), 160);
        file(&cq.join("T/1"), &file_name(0), 160);
        file(&cq.join("U/0"), &file_name(0), 40); // a truncated single file, outvoted
        let sizes = FileSizes::read(tmp.path()).expect("read");
        assert_eq!(sizes.mapped_file_size_commit_log, Some(mib));
        assert_eq!(sizes.mapped_file_size_consume_queue, Some(160));
        assert_eq!(sizes.index, None);
        // A missing middle segment (a distance of two sizes) is outvoted too; an empty file does not count.
        file(&cl, &file_name(4 * mib), mib);
        file(&cl, &file_name(5 * mib), mib);
        file(&cl, &file_name(6 * mib), 0);
        assert_eq!(FileSizes::read(tmp.path()).expect("read").mapped_file_size_commit_log, Some(mib));
        // Two segments, the last one extended: the lengths tie, the names do not.
        let two = tmp.path().join("two");
        file(&two.join("commitlog"), &file_name(0), mib);
        file(&two.join("commitlog"), &file_name(mib), 2 * mib);
        assert_eq!(FileSizes::read(&two).expect("read").mapped_file_size_commit_log, Some(mib));
    }

    #[test]
    fn single_files_give_their_length_and_no_store_gives_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert_eq!(FileSizes::read(&tmp.path().join("missing")).expect("read"), FileSizes::default());
        file(&tmp.path().join("commitlog"), &file_name(0), 65536);
        file(&tmp.path().join("commitlog"), "stray.txt", 3);
        file(&tmp.path().join("consumequeue/T/0"), &file_name(6000), 6000);
        let config = StoreConfig::from_files(tmp.path()).expect("config");
        assert_eq!(config.commit_log.mapped_file_size_commit_log, 65536);
        assert_eq!(config.consume_queue.mapped_file_size_consume_queue, 6000);
        assert_eq!(config.index, crate::index::IndexConfig::default());
    }

    #[test]
    fn index_sizes_from_a_full_file_or_the_default_ratio() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let index = tmp.path().join("index");
        // One file of the default ratio (entries = 4 × slots).
        index_file(&index, "20260101000000000", 64, 256, 3);
        assert_eq!(FileSizes::read(tmp.path()).expect("read").index, Some((64, 256)));
        // Another ratio: the full file's indexCount fixes it.
        std::fs::remove_dir_all(&index).expect("rm");
        index_file(&index, "20260101000000000", 64, 128, 128);
        let alone = FileSizes::read(tmp.path());
        assert!(matches!(alone, Err(Error::InvalidConfig(ref m)) if m.contains("max_hash_slot_num")), "{alone:?}");
        index_file(&index, "20260101000000001", 64, 128, 5);
        assert_eq!(FileSizes::read(tmp.path()).expect("read").index, Some((64, 128)));
        let config = StoreConfig::from_files(tmp.path()).expect("config");
        assert_eq!((config.index.max_hash_slot_num, config.index.max_index_num), (64, 128));
    }
}
