//! The commitlog record (spec §1–§5). All integers big-endian.
//!
//! Record layout, general offsets (`BH`/`SH` = born/store host field length, 8 for IPv4 or 20 for IPv6;
//! `TL` = topic-length width, 1 for v1 or 2 for v2; `B`, `T`, `P` = body, topic, properties byte lengths):
//!
//! | offset               | size  | type | field                                                    |
//! |----------------------|-------|------|----------------------------------------------------------|
//! | 0                    | 4     | i32  | TOTALSIZE, whole record                                  |
//! | 4                    | 4     | i32  | MAGICCODE: v1 `DAA320A7`, v2 `DAA320AB`                  |
//! | 8                    | 4     | i32  | BODYCRC, `crc32(body) & 0x7FFFFFFF`                      |
//! | 12                   | 4     | i32  | QUEUEID                                                  |
//! | 16                   | 4     | i32  | FLAG                                                     |
//! | 20                   | 8     | i64  | QUEUEOFFSET (0 for PREPARED / ROLLBACK)                  |
//! | 28                   | 8     | i64  | PHYSICALOFFSET of this record                            |
//! | 36                   | 4     | i32  | SYSFLAG                                                  |
//! | 40                   | 8     | i64  | BORNTIMESTAMP, ms                                        |
//! | 48                   | BH    | ip+i32 | BORNHOST                                               |
//! | 48+BH                | 8     | i64  | STORETIMESTAMP, ms                                       |
//! | 56+BH                | SH    | ip+i32 | STOREHOST                                              |
//! | 56+BH+SH             | 4     | i32  | RECONSUMETIMES                                           |
//! | 60+BH+SH             | 8     | i64  | PreparedTransactionOffset                                |
//! | 68+BH+SH             | 4     | i32  | BODYLENGTH `B`                                           |
//! | 72+BH+SH             | B     | u8[] | BODY                                                     |
//! | 72+BH+SH+B           | TL    | i8/i16 | TOPICLENGTH `T`                                        |
//! | 72+BH+SH+B+TL        | T     | utf8 | TOPIC                                                    |
//! | 72+BH+SH+B+TL+T      | 2     | i16  | PROPERTIESLENGTH `P`                                     |
//! | 74+BH+SH+B+TL+T      | P     | utf8 | PROPERTIES (`name 0x01 value 0x02` …)                    |
//!
//! `TOTALSIZE = 74 + BH + SH + B + TL + T + P`. The end-of-file blank is `{ i32 remaining | i32 CBD43194 }`.

pub mod decode;
pub mod encode;
pub mod ids;
pub mod properties;
pub mod tags;

pub use decode::{check_record, RecordCheck, RecordHeader};
pub use encode::{encode_record, EncodeInput};

/// Magic of a v1 record (1-byte topic length).
pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// Magic of a v2 record (2-byte topic length).
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// Magic of the end-of-file blank filler.
pub const BLANK_MAGIC: i32 = 0xCBD4_3194_u32 as i32;
/// Bytes of the end-of-file blank actually written (`END_FILE_MIN_BLANK_LENGTH`).
pub const END_FILE_MIN_BLANK_LENGTH: usize = 8;

/// Field positions that do not depend on host sizes.
pub mod pos {
    pub const TOTAL_SIZE: usize = 0;
    pub const MAGIC: usize = 4;
    pub const BODY_CRC: usize = 8;
    pub const QUEUE_ID: usize = 12;
    pub const FLAG: usize = 16;
    pub const QUEUE_OFFSET: usize = 20;
    pub const PHYSICAL_OFFSET: usize = 28;
    pub const SYS_FLAG: usize = 36;
    pub const BORN_TIMESTAMP: usize = 40;
    pub const BORN_HOST: usize = 48;
}
const _: () = assert!(pos::BORN_HOST == 48 && pos::PHYSICAL_OFFSET == 28 && pos::SYS_FLAG == 36);

/// `SYSFLAG` bits (`MessageSysFlag`).
pub mod sysflag {
    pub const COMPRESSED: i32 = 0x1;
    pub const MULTI_TAGS: i32 = 0x2;
    pub const TRANSACTION_MASK: i32 = 0xC;
    pub const TRANSACTION_NOT_TYPE: i32 = 0x0;
    pub const TRANSACTION_PREPARED: i32 = 0x4;
    pub const TRANSACTION_COMMIT: i32 = 0x8;
    pub const TRANSACTION_ROLLBACK: i32 = 0xC;
    pub const BORNHOST_V6: i32 = 0x10;
    pub const STOREHOST_V6: i32 = 0x20;
    pub const NEED_UNWRAP: i32 = 0x40;
    pub const INNER_BATCH: i32 = 0x80;
    pub const COMPRESSION_TYPE_MASK: i32 = 0x700;
}

/// Length of a host field: 4-byte IPv4 or 16-byte IPv6 address, then an i32 port.
pub const fn host_len(v6: bool) -> usize {
    if v6 {
        20
    } else {
        8
    }
}

/// `MessageExtEncoder.calMsgLength`: the TOTALSIZE of a record with these parts.
pub fn record_len(v2: bool, sys_flag: i32, body_len: usize, topic_len: usize, props_len: usize) -> usize {
    74 + host_len(sys_flag & sysflag::BORNHOST_V6 != 0)
        + host_len(sys_flag & sysflag::STOREHOST_V6 != 0)
        + body_len
        + if v2 { 2 } else { 1 }
        + topic_len
        + props_len
}

/// `UtilAll.crc32`: CRC-32 (zlib) with the top bit cleared, as a non-negative i32.
pub fn crc32(data: &[u8]) -> i32 {
    (crc32fast::hash(data) & 0x7FFF_FFFF) as i32
}

/// Transaction type stored in SYSFLAG bits 2–3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionType {
    NotType,
    Prepared,
    Commit,
    Rollback,
}

impl TransactionType {
    /// The type encoded in `sys_flag`.
    pub fn of(sys_flag: i32) -> Self {
        match sys_flag & sysflag::TRANSACTION_MASK {
            sysflag::TRANSACTION_PREPARED => TransactionType::Prepared,
            sysflag::TRANSACTION_COMMIT => TransactionType::Commit,
            sysflag::TRANSACTION_ROLLBACK => TransactionType::Rollback,
            _ => TransactionType::NotType,
        }
    }

    /// The SYSFLAG bits of this type.
    pub fn bits(self) -> i32 {
        match self {
            TransactionType::NotType => sysflag::TRANSACTION_NOT_TYPE,
            TransactionType::Prepared => sysflag::TRANSACTION_PREPARED,
            TransactionType::Commit => sysflag::TRANSACTION_COMMIT,
            TransactionType::Rollback => sysflag::TRANSACTION_ROLLBACK,
        }
    }

    /// Whether a record of this type consumes a queue offset (NOT_TYPE and COMMIT do).
    pub fn takes_queue_offset(self) -> bool {
        matches!(self, TransactionType::NotType | TransactionType::Commit)
    }
}

/// RocketMQ's `PutMessageStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PutMessageStatus {
    PutOk,
    FlushDiskTimeout,
    FlushSlaveTimeout,
    SlaveNotAvailable,
    ServiceNotAvailable,
    CreateMappedFileFailed,
    MessageIllegal,
    PropertiesSizeExceeded,
    OsPageCacheBusy,
    UnknownError,
    InSyncReplicasNotEnough,
    PutToRemoteBrokerFail,
    LmqConsumeQueueNumExceeded,
    WheelTimerFlowControl,
    WheelTimerMsgIllegal,
    WheelTimerNotEnable,
}

impl PutMessageStatus {
    /// The Java enum constant's name.
    pub fn name(self) -> &'static str {
        use PutMessageStatus::*;
        match self {
            PutOk => "PUT_OK",
            FlushDiskTimeout => "FLUSH_DISK_TIMEOUT",
            FlushSlaveTimeout => "FLUSH_SLAVE_TIMEOUT",
            SlaveNotAvailable => "SLAVE_NOT_AVAILABLE",
            ServiceNotAvailable => "SERVICE_NOT_AVAILABLE",
            CreateMappedFileFailed => "CREATE_MAPPED_FILE_FAILED",
            MessageIllegal => "MESSAGE_ILLEGAL",
            PropertiesSizeExceeded => "PROPERTIES_SIZE_EXCEEDED",
            OsPageCacheBusy => "OS_PAGE_CACHE_BUSY",
            UnknownError => "UNKNOWN_ERROR",
            InSyncReplicasNotEnough => "IN_SYNC_REPLICAS_NOT_ENOUGH",
            PutToRemoteBrokerFail => "PUT_TO_REMOTE_BROKER_FAIL",
            LmqConsumeQueueNumExceeded => "LMQ_CONSUME_QUEUE_NUM_EXCEEDED",
            WheelTimerFlowControl => "WHEEL_TIMER_FLOW_CONTROL",
            WheelTimerMsgIllegal => "WHEEL_TIMER_MSG_ILLEGAL",
            WheelTimerNotEnable => "WHEEL_TIMER_NOT_ENABLE",
        }
    }
}
