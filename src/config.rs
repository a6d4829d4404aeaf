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
    /// The put returns after the written range is flushed to disk (msync): by the group commit service,
    /// which flushes once for every put waiting, or inline when the store's services are not running.
    SyncFlush,
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

/// A setting's value as bindings and property files see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Int(i128),
    Bool(bool),
    Str(String),
    /// No value (an optional setting left out).
    Null,
}

/// As an error message shows a value given: Python's spelling, which is where settings mostly come from.
impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(n) => write!(f, "{n}"),
            Value::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Null => f.write_str("None"),
        }
    }
}

/// The type of a setting, for bindings and property files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An integer in `[min, max]`.
    Int {
        min: i128,
        max: i128,
    },
    Bool,
    Str,
    /// A string or nothing.
    OptionalStr,
    /// One of these names.
    Choice(&'static [&'static str]),
}

/// A Rust type a setting can have: how it converts to and from a [`Value`].
pub trait SettingType: Sized {
    /// The setting's kind.
    const KIND: Kind;
    /// The value as bindings see it.
    fn to_value(&self) -> Value;
    /// Parses a value; the error says what was wrong (the caller names the setting).
    fn from_value(v: Value) -> std::result::Result<Self, String>;
}

macro_rules! int_setting_type {
    ($($t:ty),*) => {$(
        impl SettingType for $t {
            const KIND: Kind = Kind::Int { min: <$t>::MIN as i128, max: <$t>::MAX as i128 };
            fn to_value(&self) -> Value {
                Value::Int(*self as i128)
            }
            fn from_value(v: Value) -> std::result::Result<Self, String> {
                match v {
                    Value::Int(n) => <$t>::try_from(n).map_err(|_| format!("{n} is out of range")),
                    other => Err(format!("must be an int, got {other}")),
                }
            }
        }
    )*};
}
int_setting_type!(u32, u64, i32, i64, usize);

impl SettingType for bool {
    const KIND: Kind = Kind::Bool;
    fn to_value(&self) -> Value {
        Value::Bool(*self)
    }
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        match v {
            Value::Bool(b) => Ok(b),
            other => Err(format!("must be a bool, got {other}")),
        }
    }
}

impl SettingType for String {
    const KIND: Kind = Kind::Str;
    fn to_value(&self) -> Value {
        Value::Str(self.clone())
    }
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        match v {
            Value::Str(s) => Ok(s),
            other => Err(format!("must be a str, got {other}")),
        }
    }
}

impl SettingType for Option<String> {
    const KIND: Kind = Kind::OptionalStr;
    fn to_value(&self) -> Value {
        self.clone().map_or(Value::Null, Value::Str)
    }
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        match v {
            Value::Str(s) => Ok(Some(s)),
            Value::Null => Ok(None),
            other => Err(format!("must be a str or None, got {other}")),
        }
    }
}

impl SettingType for SocketAddr {
    const KIND: Kind = Kind::Str;
    fn to_value(&self) -> Value {
        Value::Str(self.to_string())
    }
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        match v {
            Value::Str(s) => s.parse().map_err(|_| format!("{s:?} is not an ip:port address")),
            other => Err(format!("must be a str, got {other}")),
        }
    }
}

macro_rules! choice_setting_type {
    ($t:ty { $($variant:ident = $name:literal),* $(,)? }) => {
        impl SettingType for $t {
            const KIND: Kind = Kind::Choice(&[$($name),*]);
            fn to_value(&self) -> Value {
                Value::Str(match self { $(<$t>::$variant => $name),* }.to_owned())
            }
            fn from_value(v: Value) -> std::result::Result<Self, String> {
                match v {
                    $(Value::Str(s) if s == $name => Ok(<$t>::$variant),)*
                    other => Err(format!("must be one of {}, got {other}", [$($name),*].join(", "))),
                }
            }
        }
    };
}
choice_setting_type!(FlushDiskType { AsyncFlush = "ASYNC_FLUSH", SyncFlush = "SYNC_FLUSH" });
choice_setting_type!(BrokerRole { AsyncMaster = "ASYNC_MASTER", SyncMaster = "SYNC_MASTER", Slave = "SLAVE" });

/// One setting of [`SETTINGS`].
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The name in snake case (the Python keyword).
    pub name: &'static str,
    /// RocketMQ's name (`MessageStoreConfig` / `BrokerConfig`, as in `broker.conf`).
    pub java_name: &'static str,
    /// What it does.
    pub doc: &'static str,
    pub kind: Kind,
    get: fn(&StoreConfig) -> Value,
    set: fn(&mut StoreConfig, Value) -> std::result::Result<(), String>,
}

impl Setting {
    /// The setting's value in `config`.
    pub fn get(&self, config: &StoreConfig) -> Value {
        (self.get)(config)
    }

    /// Sets the setting in `config`; a value of the wrong type or range is [`Error::InvalidConfig`].
    pub fn set(&self, config: &mut StoreConfig, value: Value) -> Result<()> {
        (self.set)(config, value).map_err(|why| Error::InvalidConfig(format!("{} {why}", self.name)))
    }

    /// Sets the setting from its text in a property file, read as RocketMQ reads `broker.conf`
    /// (`MixAll.properties2Object`: numbers trimmed and parsed, booleans `true` in any case, text as is).
    pub fn set_text(&self, config: &mut StoreConfig, text: &str) -> Result<()> {
        let bad = || Error::InvalidConfig(format!("{}={text:?} is not a valid {}", self.java_name, self.name));
        let value = match self.kind {
            Kind::Int { .. } => Value::Int(text.trim().parse().map_err(|_| bad())?),
            Kind::Bool => Value::Bool(text.trim().eq_ignore_ascii_case("true")),
            Kind::Str | Kind::OptionalStr | Kind::Choice(_) => Value::Str(text.to_owned()),
        };
        (self.set)(config, value).map_err(|_| bad())
    }
}

/// Declares the setting groups: each field once, with its RocketMQ name, type, default and doc. The
/// structs, their `Default`, and [`SETTINGS`] (what bindings and property files go through) all come from
/// here, so a setting cannot exist in one and not the others.
macro_rules! settings {
    ($(
        $(#[$smeta:meta])*
        pub struct $group:ident in $path:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident ($java:literal): $ty:ty = $default:expr,
            )*
        }
    )*) => {
        $(
            $(#[$smeta])*
            pub struct $group {
                $(
                    #[doc = concat!("`", $java, "`", $(" ", $doc),*)]
                    #[doc = ""]
                    #[doc = concat!("Default: `", stringify!($default), "`.")]
                    pub $field: $ty,
                )*
            }

            impl Default for $group {
                fn default() -> Self {
                    $group { $($field: $default),* }
                }
            }
        )*

        /// Every setting, in declaration order (the order Python's `StoreConfig` keeps).
        pub static SETTINGS: &[Setting] = &[
            $($(
                Setting {
                    name: stringify!($field),
                    java_name: $java,
                    doc: concat!($($doc, "\n"),*),
                    kind: <$ty as SettingType>::KIND,
                    get: |c| SettingType::to_value(&c.$path.$field),
                    set: |c, v| {
                        c.$path.$field = <$ty as SettingType>::from_value(v)?;
                        Ok(())
                    },
                },
            )*)*
        ];
    };
}

settings! {
    /// Commitlog settings (`MessageStoreConfig`).
    #[derive(Debug, Clone)]
    pub struct CommitLogConfig in commit_log {
        /// Bytes per commitlog segment file.
        mapped_file_size_commit_log ("mappedFileSizeCommitLog"): u64 = 1024 * 1024 * 1024,
        /// Largest body in bytes; the whole record may be 64 KiB larger. Re-read on every put.
        max_message_size ("maxMessageSize"): i32 = 4 * 1024 * 1024,
        /// Append a `__CRC32#` property holding a CRC of the whole record.
        enabled_append_prop_crc ("enabledAppendPropCRC"): bool = false,
        /// When validating on open, check the property CRC instead of the body CRC.
        force_verify_prop_crc ("forceVerifyPropCRC"): bool = false,
        /// Write v2 records (2-byte topic length) for topics over 127 characters.
        auto_message_version_on_topic_len ("autoMessageVersionOnTopicLen"): bool = true,
        /// Verify body CRCs while finding the end of the log on open.
        check_crc_on_recover ("checkCRCOnRecover"): bool = true,
        /// ASYNC_FLUSH returns once data is in the page cache (survives a process crash); SYNC_FLUSH returns
        /// once the put's bytes are flushed to disk.
        flush_disk_type ("flushDiskType"): FlushDiskType = FlushDiskType::AsyncFlush,
    }

    /// Broker identity written into records (`BrokerConfig`).
    #[derive(Debug, Clone)]
    pub struct BrokerConfig in broker {
        /// `brokerIP1:listenPort`: the store host written into every record and message id.
        store_host ("storeHost"): SocketAddr = SocketAddr::from(([127, 0, 0, 1], 10911)),
        /// `brokerClusterName`: stored as the CLUSTER property of single puts, as a broker does (None: omit).
        broker_cluster_name ("brokerClusterName"): Option<String> = Some("DefaultCluster".to_owned()),
    }

    /// Transactional messages (`BrokerConfig`): the half-message check.
    #[derive(Debug, Clone)]
    pub struct TransactionConfig in transaction {
        /// ms a half message waits before its first check (`CHECK_IMMUNITY_TIME_IN_SECONDS` may lengthen it).
        transaction_time_out ("transactionTimeOut"): u64 = 6_000,
        /// Checks of one half message before it is discarded into `TRANS_CHECK_MAX_TIME_TOPIC`.
        transaction_check_max ("transactionCheckMax"): i32 = 15,
        /// ms between check rounds.
        transaction_check_interval ("transactionCheckInterval"): u64 = 30_000,
        /// Refuse half messages (a put with `TRAN_MSG=true`).
        reject_transaction_message ("rejectTransactionMessage"): bool = false,
    }

    /// Consume-queue settings.
    #[derive(Debug, Clone)]
    pub struct ConsumeQueueConfig in consume_queue {
        /// Bytes per consume-queue file (rounded up to whole 20-byte entries).
        mapped_file_size_consume_queue ("mappedFileSizeConsumeQueue"): u64 = crate::consume_queue::DEFAULT_FILE_SIZE,
    }

    /// Index settings (`MessageStoreConfig`). Readers must use the values the files were written with.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct IndexConfig in index {
        /// Hash slots per index file.
        max_hash_slot_num ("maxHashSlotNum"): u32 = 5_000_000,
        /// Entry numbers per index file; a file holds one fewer keys.
        max_index_num ("maxIndexNum"): u32 = 20_000_000,
        /// The most messages one key query returns.
        max_msgs_num_batch ("maxMsgsNumBatch"): usize = 64,
    }

    /// What dispatch builds from each record.
    #[derive(Debug, Clone)]
    pub struct DispatchConfig in dispatch {
        /// Build the key index.
        message_index_enable ("messageIndexEnable"): bool = true,
        /// After a crash, recovery also starts no later than the checkpoint's indexMsgTimestamp (every message
        /// of an index file that may be lost is dispatched again).
        message_index_safe ("messageIndexSafe"): bool = false,
        /// Delay levels; the tagsCode of SCHEDULE_TOPIC_XXXX entries is the delivery time.
        message_delay_level ("messageDelayLevel"): String = crate::message::tags::DEFAULT_DELAY_LEVELS.to_owned(),
    }

    /// Read-path settings (`getMessage`, spec §13).
    #[derive(Debug, Clone)]
    pub struct ReadConfig in read {
        /// Byte cap of one `get_message` when its data is hot.
        max_transfer_bytes_on_message_in_memory ("maxTransferBytesOnMessageInMemory"): u64 = 256 * 1024,
        /// Message cap of one `get_message` when its data is hot.
        max_transfer_count_on_message_in_memory ("maxTransferCountOnMessageInMemory"): u64 = 32,
        /// Byte cap of one `get_message` when its data is cold.
        max_transfer_bytes_on_message_in_disk ("maxTransferBytesOnMessageInDisk"): u64 = 64 * 1024,
        /// Message cap of one `get_message` when its data is cold.
        max_transfer_count_on_message_in_disk ("maxTransferCountOnMessageInDisk"): u64 = 8,
        /// Data within this percentage of physical memory from the end of the commitlog counts as hot.
        access_message_in_memory_max_ratio ("accessMessageInMemoryMaxRatio"): u32 = 40,
        /// Consume-queue bytes one `get_message` may scan (at least 20 x max messages).
        max_filter_message_size ("maxFilterMessageSize"): u64 = 16_000,
        /// Consume-queue files one `get_message` may scan while nothing matched.
        travel_cq_file_num_when_get_message ("travelCqFileNumWhenGetMessage"): u32 = 1,
        /// A SLAVE never moves a reader's offset on error statuses (unless `offset_check_in_slave`).
        broker_role ("brokerRole"): BrokerRole = BrokerRole::AsyncMaster,
        /// Let a slave correct offsets too.
        offset_check_in_slave ("offsetCheckInSlave"): bool = false,
    }

    /// Flush schedules (spec §11.5: `FlushRealTimeService` under ASYNC_FLUSH, `FlushConsumeQueueService`).
    /// Intervals in ms; a page is 4 KiB.
    #[derive(Debug, Clone)]
    pub struct FlushConfig in flush {
        /// ASYNC_FLUSH: ms between commitlog flush rounds.
        flush_interval_commit_log ("flushIntervalCommitLog"): u64 = 500,
        /// ASYNC_FLUSH: a round flushes a segment only when it is full or at least this many new pages were
        /// written since its last flush (0: any new byte).
        flush_commit_log_least_pages ("flushCommitLogLeastPages"): u64 = 4,
        /// ASYNC_FLUSH: ms between thorough rounds, which flush every written byte.
        flush_commit_log_thorough_interval ("flushCommitLogThoroughInterval"): u64 = 10_000,
        /// ASYNC_FLUSH: true sleeps the interval out; false waits it out but wakes early when a put asks
        /// (`wake_flush_when_put_message`).
        flush_commit_log_timed ("flushCommitLogTimed"): bool = true,
        /// ASYNC_FLUSH: every put wakes the commitlog flush service (when it is not timed).
        wake_flush_when_put_message ("wakeFlushWhenPutMessage"): bool = false,
        /// ms between consume-queue flush rounds; each round then writes the checkpoint.
        flush_interval_consume_queue ("flushIntervalConsumeQueue"): u64 = 1000,
        /// A round flushes a consume-queue file only when it is full or this many new pages were written (0: any).
        flush_consume_queue_least_pages ("flushConsumeQueueLeastPages"): u64 = 2,
        /// ms between thorough consume-queue rounds, which flush every entry and the index.
        flush_consume_queue_thorough_interval ("flushConsumeQueueThoroughInterval"): u64 = 60_000,
    }

    /// SYNC_FLUSH group commit (`GroupCommitService`, spec §11.5).
    #[derive(Debug, Clone)]
    pub struct SyncFlushConfig in sync_flush {
        /// Under SYNC_FLUSH, how long a put whose `WAIT` is true waits for the group commit to flush past it
        /// before returning FLUSH_DISK_TIMEOUT (stored, durability not confirmed), ms.
        sync_flush_timeout ("syncFlushTimeout"): u64 = 5000,
    }

    /// The transient store pool and its commit service (`TransientStorePool`, `CommitRealTimeService`, spec
    /// §11.5). Effective only with ASYNC_FLUSH on a role other than SLAVE, as in RocketMQ; otherwise ignored
    /// (and said so in the recovery report).
    #[derive(Debug, Clone)]
    pub struct TransientPoolConfig in transient_pool {
        /// Puts write into pooled off-heap buffers (mlock attempted) that the commit service copies into the
        /// files; readers see only committed data, and a killed process loses what was not committed.
        transient_store_pool_enable ("transientStorePoolEnable"): bool = false,
        /// Buffers of one commitlog segment each.
        transient_store_pool_size ("transientStorePoolSize"): u32 = 5,
        /// The commit service's period, ms.
        commit_interval_commit_log ("commitIntervalCommitLog"): u64 = 200,
        /// 4 KiB pages a commit waits for, unless thorough.
        commit_commit_log_least_pages ("commitCommitLogLeastPages"): u64 = 4,
        /// A commit of whatever is there at least this often, ms.
        commit_commit_log_thorough_interval ("commitCommitLogThoroughInterval"): u64 = 200,
        /// Every put wakes the commit service.
        wake_commit_when_put_message ("wakeCommitWhenPutMessage"): bool = true,
    }

    /// The schedule service (`ScheduleMessageService`: delay levels, `config/delayOffset.json`).
    #[derive(Debug, Clone)]
    pub struct ScheduleConfig in schedule {
        /// Ms between two persists of `config/delayOffset.json` (the first one interval after the service
        /// starts; one more on stop). A killed process re-delivers at most what it delivered since the last one.
        flush_delay_offset_interval ("flushDelayOffsetInterval"): u64 = 10_000,
        /// `BrokerConfig.delayOffsetUpdateVersionStep`: the file's data version advances once every this many
        /// offset updates.
        delay_offset_update_version_step ("delayOffsetUpdateVersionStep"): u64 = 200,
    }

    /// Expired-file cleanup (`CleanCommitLogService`, `CleanConsumeQueueService`; spec §14).
    #[derive(Debug, Clone)]
    pub struct CleanConfig in clean {
        /// Hours a commitlog segment is kept after its last modification.
        file_reserved_time ("fileReservedTime"): i32 = 72,
        /// `;`-separated local hours (0-23) at which expired segments are deleted.
        delete_when ("deleteWhen"): String = "04".to_owned(),
        /// Percent of the disk in use above which expired segments are deleted at any hour (clamped to 10-95).
        disk_max_used_space_ratio ("diskMaxUsedSpaceRatio"): i32 = 75,
        /// Percent in use above which puts are refused (SERVICE_NOT_AVAILABLE) and segments are deleted at
        /// once, expired or not (clamped to 35-90).
        disk_space_warning_level_ratio ("diskSpaceWarningLevelRatio"): i32 = 90,
        /// Percent in use above which segments are deleted at once, expired or not (clamped to 30-85).
        disk_space_clean_forcibly_ratio ("diskSpaceCleanForciblyRatio"): i32 = 85,
        /// Let the two ratios above delete segments that have not expired.
        clean_file_forcibly_enable ("cleanFileForciblyEnable"): bool = true,
        /// Pause in ms between two deleted segments.
        delete_commit_log_files_interval ("deleteCommitLogFilesInterval"): u64 = 100,
        /// Pause in ms after a consume queue that deleted files.
        delete_consume_queue_files_interval ("deleteConsumeQueueFilesInterval"): u64 = 100,
        /// How long RocketMQ waits for readers of a deleted file (ms). Accepted; rmq unlinks at once and a
        /// reader's mapping keeps its bytes until dropped, so nothing waits.
        destroy_mapped_file_interval_forcibly ("destroyMapedFileIntervalForcibly"): u64 = 120_000,
        /// Most segments deleted per run.
        delete_file_batch_max ("deleteFileBatchMax"): u32 = 10,
        /// Ms between two cleanup runs.
        clean_resource_interval ("cleanResourceInterval"): u64 = 10_000,
        /// RocketMQ's retry (ms) of a file whose destroy waited on readers. Accepted; rmq never leaves one.
        redelete_hanged_file_interval ("redeleteHangedFileInterval"): u64 = 120_000,
    }
}

/// rmq's own timing of the services, not a RocketMQ setting (so not in [`SETTINGS`]); tests shorten it.
#[derive(Debug, Clone)]
pub struct ServiceTiming {
    /// Ms before the first cleanup run after the services start (RocketMQ schedules it 60 s after start).
    pub clean_initial_delay_ms: u64,
    /// Under SYNC_FLUSH, the longest the group commit service waits (µs) for the producers its last flush served
    /// to put again before it flushes (never more than half the last flush's time); 0 never waits.
    pub group_commit_gather_max_us: u64,
}

impl Default for ServiceTiming {
    fn default() -> Self {
        ServiceTiming { clean_initial_delay_ms: 60_000, group_commit_gather_max_us: 1_000 }
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

/// The whole configuration of a store: one group per subsystem (every setting is in [`SETTINGS`]).
#[derive(Debug, Clone, Default)]
pub struct StoreConfig {
    /// Commitlog settings.
    pub commit_log: CommitLogConfig,
    /// Broker identity.
    pub broker: BrokerConfig,
    /// Transactional messages.
    pub transaction: TransactionConfig,
    /// Consume-queue settings.
    pub consume_queue: ConsumeQueueConfig,
    /// Index file sizes and the query cap.
    pub index: IndexConfig,
    /// What dispatch builds.
    pub dispatch: DispatchConfig,
    /// Read-path (`getMessage`) settings.
    pub read: ReadConfig,
    /// Flush schedules.
    pub flush: FlushConfig,
    /// SYNC_FLUSH group commit settings.
    pub sync_flush: SyncFlushConfig,
    /// The transient store pool and its commit service.
    pub transient_pool: TransientPoolConfig,
    /// Expired-file cleanup.
    pub clean: CleanConfig,
    /// The schedule (delay level) service.
    pub schedule: ScheduleConfig,
    /// rmq's own service timing (not a RocketMQ setting).
    pub timing: ServiceTiming,
}

impl StoreConfig {
    /// The setting named `name` (snake case), if there is one.
    pub fn setting(name: &str) -> Option<&'static Setting> {
        SETTINGS.iter().find(|s| s.name == name)
    }

    /// Sets `name` to `value`; an unknown name or a bad value is [`Error::InvalidConfig`].
    pub fn set(&mut self, name: &str, value: Value) -> Result<()> {
        Self::setting(name).ok_or_else(|| Error::InvalidConfig(format!("unknown setting {name:?}")))?.set(self, value)
    }

    /// Every setting's value, in [`SETTINGS`] order.
    pub fn values(&self) -> Vec<(&'static str, Value)> {
        SETTINGS.iter().map(|s| (s.name, s.get(self))).collect()
    }

    /// The configuration a RocketMQ `broker.conf` describes (`MixAll.properties2Object`): the defaults with
    /// each property whose name is a setting's RocketMQ name set from its text; `brokerIP1` and `listenPort`
    /// form `store_host`; other keys are ignored, as the broker ignores keys of other components.
    pub fn from_properties<'a>(props: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self> {
        let mut config = StoreConfig::default();
        let (mut ip, mut port) = (None, None);
        for (key, text) in props {
            match key {
                "brokerIP1" => ip = Some(text.trim().to_owned()),
                "listenPort" => port = Some(text.trim().to_owned()),
                _ => {
                    if let Some(s) = SETTINGS.iter().find(|s| s.java_name == key && s.name != "store_host") {
                        s.set_text(&mut config, text)?;
                    }
                }
            }
        }
        if ip.is_some() || port.is_some() {
            let host = config.broker.store_host;
            let ip = ip.unwrap_or_else(|| host.ip().to_string());
            let port = port.unwrap_or_else(|| host.port().to_string());
            let text = if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") };
            config.broker.store_host = text.parse().map_err(|_| Error::InvalidHost(text))?;
        }
        Ok(config)
    }
}

/// The smallest `maxMessageSize` RocketMQ takes (`updateMaxMessageSize` ignores smaller values; a config or
/// `set_max_message_size` below it is refused here).
pub const MIN_MAX_MESSAGE_SIZE: i32 = 10;

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
        if c.max_message_size < MIN_MAX_MESSAGE_SIZE {
            return Err(Error::InvalidConfig(format!(
                "max_message_size must be at least {MIN_MAX_MESSAGE_SIZE} bytes, got {}",
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
        let tp = &self.transient_pool;
        if tp.transient_store_pool_enable && tp.transient_store_pool_size == 0 {
            return Err(Error::InvalidConfig("transient_store_pool_size must be at least 1".into()));
        }
        self.clean.validate()?;
        crate::message::tags::check_delay_levels(&self.dispatch.message_delay_level)
            .map_err(|why| Error::InvalidConfig(format!("message_delay_level: {why}")))?;
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
    ///   missing segment does not count, or the files' most common length when every distance is a whole
    ///   number of it: a missing segment between the only two left); otherwise the most common length of its
    ///   files. A truncated or
    ///   extended segment therefore does not decide the size: opening then reports it as damage.
    /// - Index files (`40 + 4 × slots + 20 × entries` bytes): a full file (any but the newest) has
    ///   `indexCount = maxIndexNum` in its header, which fixes both; with only the newest file, RocketMQ's
    ///   default ratio (entries = 4 × slots) when the length fits it, else (files up to 64 MiB) the one layout
    ///   under which the file's slots and chains are what `putKey` writes. When neither tells,
    ///   [`Error::InvalidConfig`]: the sizes must then be given.
    pub fn read(root: &Path) -> Result<Self> {
        let mut sizes = FileSizes::read_segments(root)?;
        sizes.index = index_sizes(&root.join("index"))?;
        Ok(sizes)
    }

    /// [`read`](Self::read) without the index sizes (for a caller that gives them: an index file whose sizes
    /// cannot be told is then no error).
    pub fn read_segments(root: &Path) -> Result<Self> {
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
    let length = most_common(&dirs.iter().flatten().map(|&(_, len)| len).collect::<Vec<_>>());
    if distances.is_empty() {
        return length;
    }
    // The files' common length when every distance is a whole number of it: names two or more lengths apart
    // are segments missing between them (the only distance of three segments with the middle one gone).
    match length {
        Some(len) if len > 0 && distances.iter().all(|d| d % len == 0) => Some(len),
        _ => most_common(&distances),
    }
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
        // An entry stored holds its key's hash, which is never 0 in practice (`abs(hashCode)` of "topic#key"):
        // zeros read as an entry under a wrong layout must not fit just because slot 0 is the one in use.
        let fits_entry = |i: usize| -> Option<bool> {
            let slot = slot_of(i)?;
            let newest = usize::try_from(be(HEADER_SIZE + slot * SLOT_SIZE)?).ok()?;
            let prev = usize::try_from(be(entry(i) + 16)?).ok()?;
            Some(
                be(entry(i))? != 0 && newest >= i && newest < used && prev < i && (prev == 0 || slot_of(prev)? == slot),
            )
        };
        // Every slot in use names a stored entry of its own slot (or the one a live writer is adding, which the
        // header does not count yet): the bytes of entries read under a wrong layout as slots name none.
        let fits_slot = |s: usize| -> Option<bool> {
            let newest = be(HEADER_SIZE + s * SLOT_SIZE)?;
            let Ok(n) = usize::try_from(newest) else { return Some(false) };
            Some(n == 0 || n == used || (n < used && slot_of(n)? == s))
        };
        if (1..used).all(|i| fits_entry(i) == Some(true)) && (0..slots).all(|s| fits_slot(s) == Some(true)) {
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
    fn every_setting_reads_back_what_it_was_set_to_and_names_are_unique() {
        let mut names = std::collections::HashSet::new();
        let mut java = std::collections::HashSet::new();
        for s in SETTINGS {
            assert!(names.insert(s.name) && java.insert(s.java_name), "{} declared twice", s.name);
            let mut c = StoreConfig::default();
            let v = s.get(&c);
            s.set(&mut c, v.clone()).expect("the default is valid");
            assert_eq!(s.get(&c), v);
            assert!(s.set(&mut c, Value::Null).is_err() || s.kind == Kind::OptionalStr, "{}", s.name);
        }
        let mut c = StoreConfig::default();
        assert!(c.set("max_message_size", Value::Int(i128::from(i32::MAX) + 1)).is_err());
        c.set("flush_disk_type", Value::Str("SYNC_FLUSH".into())).expect("set");
        assert_eq!(c.commit_log.flush_disk_type, FlushDiskType::SyncFlush);
        let props = [("maxMessageSize", " 99 "), ("brokerIP1", "10.0.0.1"), ("checkCRCOnRecover", "FALSE"), ("x", "y")];
        let c = StoreConfig::from_properties(props).expect("props");
        assert_eq!(c.commit_log.max_message_size, 99);
        assert!(!c.commit_log.check_crc_on_recover);
        assert_eq!(c.broker.store_host, "10.0.0.1:10911".parse().expect("addr"));
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
        // Three segments with the middle one missing: the only distance is two sizes, the lengths say one.
        let gap = tmp.path().join("gap");
        file(&gap.join("commitlog"), &file_name(0), 65536);
        file(&gap.join("commitlog"), &file_name(2 * 65536), 65536);
        assert_eq!(FileSizes::read(&gap).expect("read").mapped_file_size_commit_log, Some(65536));
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

    /// An index file of `slots` and `entries` holding `keys` as `putKey` writes them: (hash, phyOffset,
    /// timeDiff) each.
    fn index_bytes(slots: usize, entries: usize, keys: &[(i32, i64, i32)]) -> Vec<u8> {
        let mut b = vec![0u8; 40 + 4 * slots + 20 * entries];
        let entry = |i: usize| 40 + 4 * slots + 20 * i;
        for (n, &(hash, phy, diff)) in keys.iter().enumerate() {
            let i = n + 1;
            let slot = 40 + 4 * (hash.unsigned_abs() as usize % slots);
            let prev = i32::from_be_bytes(b[slot..slot + 4].try_into().expect("4 bytes"));
            b[entry(i)..entry(i) + 4].copy_from_slice(&hash.to_be_bytes());
            b[entry(i) + 4..entry(i) + 12].copy_from_slice(&phy.to_be_bytes());
            b[entry(i) + 12..entry(i) + 16].copy_from_slice(&diff.to_be_bytes());
            b[entry(i) + 16..entry(i) + 20].copy_from_slice(&prev.to_be_bytes());
            b[slot..slot + 4].copy_from_slice(&(i as i32).to_be_bytes());
        }
        b[36..40].copy_from_slice(&(keys.len() as i32 + 1).to_be_bytes());
        b
    }

    #[test]
    fn one_key_in_slot_0_at_offset_0_tells_its_layout() {
        // The first message's key (commitlog offset 0, the file's first second) hashing to slot 0: the entry
        // is its hash and zeros, and zeros read as an entry under any other layout used to fit too (an open
        // without a config then asked for the sizes, for about one store in fourteen).
        let b = index_bytes(16, 32, &[(16 * 12345, 0, 0)]);
        assert_eq!(index_layouts_that_fit(&b), [(16, 32)]);
    }

    proptest::proptest! {
        /// A file `putKey` wrote always fits its own layout.
        #[test]
        fn an_index_file_fits_its_own_layout(
            slots in 1usize..40,
            extra in 0usize..20,
            keys in proptest::collection::vec((1i32..=i32::MAX, 0i64..1 << 20, 0i32..5), 1..30),
        ) {
            let entries = keys.len() + 1 + extra;
            let b = index_bytes(slots, entries, &keys);
            let fits = index_layouts_that_fit(&b);
            proptest::prop_assert!(fits.contains(&(slots as u32, entries as u32)), "{fits:?}");
        }
    }
}
