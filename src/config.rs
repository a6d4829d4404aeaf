//! Store configuration: RocketMQ's `MessageStoreConfig` / `BrokerConfig` setting names (in snake case)
//! and defaults, grouped by subsystem. Only settings that change behaviour in rmq are here.

use std::net::SocketAddr;

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
        if let Some(name) = &self.broker.broker_cluster_name {
            crate::message::properties::check_property(crate::message::properties::keys::CLUSTER, name)?;
        }
        Ok(())
    }
}
