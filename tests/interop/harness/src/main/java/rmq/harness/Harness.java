package rmq.harness;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

import org.apache.rocketmq.broker.offset.ConsumerOffsetManager;
import org.apache.rocketmq.common.BoundaryType;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.common.message.MessageVersion;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.GetMessageStatus;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.queue.CqUnit;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * Drives Apache RocketMQ's DefaultMessageStore and ConsumerOffsetManager for rmq's interop tests.
 * The commands, the write matrix and the canonical description are specified in ../../README.md.
 */
public final class Harness {
    static final int COMMITLOG_SIZE = 65536;
    static final int CQ_SIZE = 160;
    static final String LONG_TOPIC = "%RETRY%" + "g".repeat(193);
    static final String READ_GROUP = "interop";

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            throw new IllegalArgumentException("usage: Harness write|read|vectors|offsets-write|offsets-read ...");
        }
        try {
            run(args);
        } catch (Throwable t) {
            // The store's non-daemon threads would keep a failed JVM alive: fail loudly and exit instead.
            t.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    static void run(String[] args) throws Exception {
        switch (args[0]) {
            case "write":
                write(args[1], args.length > 2 && args[2].equals("--abort"));
                break;
            case "read":
                read(args[1], args[2]);
                break;
            case "offsets-write":
                offsetsWrite(args[1]);
                break;
            case "offsets-read":
                offsetsRead(args[1], args[2]);
                break;
            case "vectors":
                vectors(args[1], args[2]);
                break;
            case "answers":
                answers(args[1], args[2], args[3]);
                break;
            case "clean":
                clean(args[1], Integer.parseInt(args[2]));
                break;
            default:
                throw new IllegalArgumentException("unknown command " + args[0]);
        }
    }

    // -- the store ------------------------------------------------------------------------------------------

    static DefaultMessageStore open(String dir) throws Exception {
        return open(dir, new MessageStoreConfig());
    }

    static DefaultMessageStore open(String dir, MessageStoreConfig config) throws Exception {
        config.setStorePathRootDir(dir);
        config.setStorePathCommitLog(dir + File.separator + "commitlog");
        config.setMappedFileSizeCommitLog(COMMITLOG_SIZE);
        config.setMappedFileSizeConsumeQueue(CQ_SIZE);
        config.setMaxHashSlotNum(64);
        config.setMaxIndexNum(128);
        config.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);
        config.setHaListenPort(0);
        DefaultMessageStore store = new DefaultMessageStore(config, new BrokerStatsManager("harness", true),
            (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap, properties) -> { },
            new BrokerConfig(), new ConcurrentHashMap<>());
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed for " + dir);
        }
        store.start();
        waitDispatched(store);
        return store;
    }

    static void waitDispatched(DefaultMessageStore store) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 60_000;
        while (store.dispatchBehindBytes() > 0) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("dispatch did not catch up");
            }
            Thread.sleep(5);
        }
    }

    // -- write ----------------------------------------------------------------------------------------------

    static byte[] bodyOf(int i) throws Exception {
        int n = 100 + (i * 37) % 1900;
        byte[] seed = MessageDigest.getInstance("SHA-256").digest(("rmq-" + i).getBytes(StandardCharsets.UTF_8));
        byte[] body = new byte[n];
        for (int k = 0; k < n; k++) {
            body[k] = seed[k % seed.length];
        }
        return body;
    }

    static InetSocketAddress host(String addr, int port) throws IOException {
        return new InetSocketAddress(InetAddress.getByName(addr), port);
    }

    static MessageExtBrokerInner inner(String topic, int queueId, byte[] body, String tags, String keys,
                                       InetSocketAddress born, InetSocketAddress storeHost) {
        MessageExtBrokerInner msg = new MessageExtBrokerInner();
        msg.setTopic(topic);
        msg.setQueueId(queueId);
        msg.setBody(body);
        if (tags != null) {
            msg.setTags(tags);
        }
        if (keys != null) {
            msg.setKeys(keys);
        }
        MessageClientIDSetter.setUniqID(msg);
        msg.setBornTimestamp(System.currentTimeMillis());
        msg.setBornHost(born);
        msg.setStoreHost(storeHost);
        if (born.getAddress() instanceof Inet6Address) {
            msg.setBornHostV6Flag();
        }
        if (storeHost.getAddress() instanceof Inet6Address) {
            msg.setStoreHostAddressV6Flag();
        }
        if (topic.length() > Byte.MAX_VALUE) {
            msg.setVersion(MessageVersion.MESSAGE_VERSION_V2);
        }
        return msg;
    }

    static PutMessageResult put(DefaultMessageStore store, MessageExtBrokerInner msg) throws Exception {
        msg.setPropertiesString(MessageDecoder.messageProperties2String(msg.getProperties()));
        msg.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(msg.getTags()));
        PutMessageResult r = store.putMessage(msg);
        if (!r.isOk()) {
            throw new IllegalStateException("putMessage " + msg.getTopic() + ": " + r.getPutMessageStatus());
        }
        Thread.sleep(2); // distinct index file names (named by the millisecond they are created in)
        return r;
    }

    static void write(String dir, boolean abort) throws Exception {
        DefaultMessageStore store = open(dir);
        String[] tagsCycle = {"TagA", "\u6807\u7b7e", "", null};
        InetSocketAddress store4 = host("10.0.0.2", 10911);
        InetSocketAddress store6 = host("2001:db8::2", 10911);
        for (int i = 0; i < 280; i++) {
            String topic = i % 3 != 0 ? "TopicA" : "TopicB";
            int qid = i % 3 != 0 ? i % 4 : i % 2;
            if (i % 47 == 0) {
                topic = LONG_TOPIC;
                qid = 0;
            }
            InetSocketAddress born = i % 2 == 1
                ? host("192.168.0." + (i % 250 + 1), 20000 + i)
                : host("2001:db8::" + Integer.toHexString(i % 250 + 1), 20000 + i);
            String keys = "k" + i + "-a k" + i + "-b k" + i + "-c";
            MessageExtBrokerInner msg = inner(topic, qid, bodyOf(i), tagsCycle[i % 4], keys, born,
                i % 5 == 4 ? store6 : store4);
            MessageAccessor.putProperty(msg, "color", "red");
            MessageAccessor.putProperty(msg, "\u4e2d\u6587", "\u7ea2");
            if (i == 30) {
                MessageAccessor.putProperty(msg, MessageConst.PROPERTY_DELAY_TIME_LEVEL, "3");
            }
            if (i == 31) {
                msg.setReconsumeTimes(2);
                msg.setFlag(7);
            }
            put(store, msg);
        }
        // A transaction: PREPARED, its COMMIT, and a second PREPARED rolled back.
        InetSocketAddress born = host("192.168.0.9", 30000);
        long[] prepared = new long[2];
        for (int t = 0; t < 2; t++) {
            MessageExtBrokerInner p = inner("TopicA", 0, ("tx-" + (t + 1)).getBytes(StandardCharsets.UTF_8), null,
                "tx-" + (t + 1), born, store4);
            p.setSysFlag(p.getSysFlag() | MessageSysFlag.TRANSACTION_PREPARED_TYPE);
            MessageAccessor.putProperty(p, MessageConst.PROPERTY_TRANSACTION_PREPARED, "true");
            prepared[t] = put(store, p).getAppendMessageResult().getWroteOffset();
        }
        for (int t = 0; t < 2; t++) {
            MessageExtBrokerInner end = inner("TopicA", 0, ("tx-" + (t + 1)).getBytes(StandardCharsets.UTF_8), null,
                "tx-" + (t + 1), born, store4);
            end.setSysFlag(end.getSysFlag()
                | (t == 0 ? MessageSysFlag.TRANSACTION_COMMIT_TYPE : MessageSysFlag.TRANSACTION_ROLLBACK_TYPE));
            end.setPreparedTransactionOffset(prepared[t]);
            put(store, end);
        }
        // A traditional batch of 10 to TopicB queue 1.
        List<Message> batch = new ArrayList<>();
        for (int n = 0; n < 10; n++) {
            Message m = new Message("TopicB", "TagB", "b" + n, ("batch-" + n).getBytes(StandardCharsets.UTF_8));
            MessageClientIDSetter.setUniqID(m);
            batch.add(m);
        }
        MessageExtBatch b = new MessageExtBatch();
        b.setTopic("TopicB");
        b.setQueueId(1);
        b.setBody(MessageDecoder.encodeMessages(batch));
        b.setBornTimestamp(System.currentTimeMillis());
        b.setBornHost(born);
        b.setStoreHost(store4);
        b.setPropertiesString(MessageDecoder.messageProperties2String(b.getProperties()));
        PutMessageResult r = store.putMessages(b);
        if (!r.isOk()) {
            throw new IllegalStateException("putMessages: " + r.getPutMessageStatus());
        }
        waitDispatched(store);
        if (abort) {
            store.flush();
            Runtime.getRuntime().halt(0); // the abort file stays, as after a crash
        }
        store.shutdown();
    }

    // -- read: the canonical description --------------------------------------------------------------------

    static String hostHex(ByteBuffer raw, int pos, boolean v6) {
        int len = v6 ? 16 : 4;
        StringBuilder s = new StringBuilder();
        for (int k = 0; k < len; k++) {
            s.append(String.format("%02X", raw.get(pos + k) & 0xff));
        }
        return s.append(':').append(raw.getInt(pos + len)).toString();
    }

    /** The record's fields read from its bytes (spec §1.2); returns the byte offsets of the host fields too. */
    static Map<String, Object> messageLine(ByteBuffer raw, long physicalOffset) throws Exception {
        raw = raw.slice();
        MessageExt m = MessageDecoder.decode(raw.duplicate(), true, false, false);
        int magic = raw.getInt(4);
        int version = magic == MessageDecoder.MESSAGE_MAGIC_CODE_V2 ? 2 : 1;
        int sysFlag = raw.getInt(36);
        boolean bornV6 = (sysFlag & MessageSysFlag.BORNHOST_V6_FLAG) != 0;
        boolean storeV6 = (sysFlag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG) != 0;
        int pos = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8;
        int bornPos = pos;
        pos += bornV6 ? 20 : 8;
        pos += 8;
        int storePos = pos;
        pos += storeV6 ? 20 : 8;
        pos += 4 + 8;
        int bodyLen = raw.getInt(pos);
        pos += 4 + Math.max(bodyLen, 0);
        if (version == 2) {
            pos += 2 + raw.getShort(pos);
        } else {
            pos += 1 + (raw.get(pos) & 0xff);
        }
        int propsLen = raw.getShort(pos);
        byte[] props = new byte[Math.max(propsLen, 0)];
        raw.get(pos + 2, props);
        byte[] body = m.getBody() == null ? new byte[0] : m.getBody();

        Map<String, Object> o = new LinkedHashMap<>();
        o.put("type", "message");
        o.put("physicalOffset", physicalOffset);
        o.put("size", m.getStoreSize());
        o.put("version", version);
        o.put("topic", m.getTopic());
        o.put("queueId", m.getQueueId());
        o.put("queueOffset", m.getQueueOffset());
        o.put("sysFlag", m.getSysFlag());
        o.put("flag", m.getFlag());
        o.put("bodyCrc", m.getBodyCRC());
        o.put("bodySha256", hex(MessageDigest.getInstance("SHA-256").digest(body)).toLowerCase());
        o.put("bornTimestamp", m.getBornTimestamp());
        o.put("storeTimestamp", m.getStoreTimestamp());
        o.put("bornHost", hostHex(raw, bornPos, bornV6));
        o.put("storeHost", hostHex(raw, storePos, storeV6));
        o.put("reconsumeTimes", m.getReconsumeTimes());
        o.put("preparedTransactionOffset", m.getPreparedTransactionOffset());
        o.put("properties", new String(props, StandardCharsets.UTF_8));
        o.put("msgId", m.getMsgId());
        o.put("_keys", keysOf(m));
        return o;
    }

    static List<String> keysOf(MessageExt m) {
        List<String> keys = new ArrayList<>();
        String uniq = m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
        if (uniq != null && !uniq.isEmpty()) {
            keys.add(uniq);
        }
        String k = m.getKeys();
        if (k != null) {
            for (String key : k.split(MessageConst.KEY_SEPARATOR)) {
                if (!key.isEmpty()) {
                    keys.add(key);
                }
            }
        }
        return keys;
    }

    static String hex(byte[] bytes) {
        StringBuilder s = new StringBuilder();
        for (byte b : bytes) {
            s.append(String.format("%02X", b & 0xff));
        }
        return s.toString();
    }

    static List<String> sortedNames(File dir) {
        String[] names = dir.list();
        List<String> out = names == null ? new ArrayList<>() : new ArrayList<>(Arrays.asList(names));
        out.sort(null);
        return out;
    }

    static Map<String, Object> indexHeader(File f) throws IOException {
        try (RandomAccessFile raf = new RandomAccessFile(f, "r")) {
            byte[] head = new byte[40];
            raf.readFully(head);
            ByteBuffer b = ByteBuffer.wrap(head);
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("name", f.getName());
            o.put("beginTimestamp", b.getLong(0));
            o.put("endTimestamp", b.getLong(8));
            o.put("beginPhyOffset", b.getLong(16));
            o.put("endPhyOffset", b.getLong(24));
            o.put("hashSlotCount", b.getInt(32));
            o.put("indexCount", b.getInt(36));
            return o;
        }
    }

    static Map<String, Object> readAt(DefaultMessageStore store, String topic, int qid, long offset) {
        GetMessageResult r = store.getMessage(READ_GROUP, topic, qid, offset, 32, null);
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("offset", offset);
        o.put("status", r.getStatus().name());
        o.put("nextBeginOffset", r.getNextBeginOffset());
        o.put("minOffset", r.getMinOffset());
        o.put("maxOffset", r.getMaxOffset());
        List<Object> phys = new ArrayList<>();
        for (SelectMappedBufferResult s : r.getMessageMapedList()) {
            phys.add(s.getStartOffset());
        }
        o.put("physicalOffsets", phys);
        r.release();
        return o;
    }

    static void read(String dir, String out) throws Exception {
        DefaultMessageStore store = open(dir);
        List<String> lines = new ArrayList<>();
        File root = new File(dir);

        // The queues on disk, sorted by topic then queue id.
        TreeMap<String, TreeSet<Integer>> queues = new TreeMap<>();
        for (String topic : sortedNames(new File(root, "consumequeue"))) {
            TreeSet<Integer> ids = new TreeSet<>();
            for (String q : sortedNames(new File(new File(root, "consumequeue"), topic))) {
                if (q.matches("\\d+")) {
                    ids.add(Integer.parseInt(q));
                }
            }
            queues.put(topic, ids);
        }

        Map<String, Object> s = new LinkedHashMap<>();
        s.put("type", "store");
        s.put("minPhyOffset", store.getMinPhyOffset());
        s.put("maxPhyOffset", store.getMaxPhyOffset());
        s.put("commitlogFiles", sortedNames(new File(root, "commitlog")));
        Map<String, Object> cqFiles = new LinkedHashMap<>();
        for (Map.Entry<String, TreeSet<Integer>> e : queues.entrySet()) {
            for (int q : e.getValue()) {
                File qdir = new File(new File(new File(root, "consumequeue"), e.getKey()), String.valueOf(q));
                cqFiles.put(e.getKey() + "/" + q, sortedNames(qdir));
            }
        }
        s.put("consumeQueueFiles", cqFiles);
        List<Object> index = new ArrayList<>();
        for (String name : sortedNames(new File(root, "index"))) {
            index.add(indexHeader(new File(new File(root, "index"), name)));
        }
        s.put("indexFiles", index);
        lines.add(Json.write(s));

        // Every record, jumping over blank fillers to the next segment.
        TreeSet<String> keys = new TreeSet<>((a, b) -> {
            String[] x = a.split("\u0000", 2);
            String[] y = b.split("\u0000", 2);
            int c = x[0].compareTo(y[0]);
            return c != 0 ? c : x[1].compareTo(y[1]);
        });
        long offset = store.getMinPhyOffset();
        long max = store.getMaxPhyOffset();
        while (offset < max) {
            SelectMappedBufferResult r = store.selectOneMessageByOffset(offset);
            if (r == null) {
                throw new IllegalStateException("no record at " + offset);
            }
            try {
                ByteBuffer b = r.getByteBuffer();
                int size = b.getInt(0);
                int magic = b.getInt(4);
                if (magic == MessageDecoder.BLANK_MAGIC_CODE) {
                    offset += COMMITLOG_SIZE - offset % COMMITLOG_SIZE;
                    continue;
                }
                Map<String, Object> m = messageLine(b, offset);
                @SuppressWarnings("unchecked")
                List<String> msgKeys = (List<String>) m.remove("_keys");
                for (String k : msgKeys) {
                    keys.add(m.get("topic") + "\u0000" + k);
                }
                lines.add(Json.write(m));
                offset += size;
            } finally {
                r.release();
            }
        }

        for (Map.Entry<String, TreeSet<Integer>> e : queues.entrySet()) {
            for (int q : e.getValue()) {
                String topic = e.getKey();
                long lo = store.getMinOffsetInQueue(topic, q);
                long hi = store.getMaxOffsetInQueue(topic, q);
                ConsumeQueueInterface cq = store.getConsumeQueue(topic, q);
                List<Object> entries = new ArrayList<>();
                for (long i = lo; i < hi; i++) {
                    CqUnit u = cq.get(i);
                    entries.add(List.of(i, u.getPos(), (long) u.getSize(), u.getTagsCode()));
                }
                List<Object> reads = new ArrayList<>();
                long at = lo;
                while (true) {
                    Map<String, Object> rd = readAt(store, topic, q, at);
                    reads.add(rd);
                    if (!rd.get("status").equals(GetMessageStatus.FOUND.name())) {
                        break;
                    }
                    at = (Long) rd.get("nextBeginOffset");
                }
                reads.add(readAt(store, topic, q, hi + 5));
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("type", "queue");
                o.put("topic", topic);
                o.put("queueId", q);
                o.put("minOffset", lo);
                o.put("maxOffset", hi);
                o.put("entries", entries);
                o.put("reads", reads);
                lines.add(Json.write(o));
            }
        }

        for (String tk : keys) {
            String[] parts = tk.split("\u0000", 2);
            QueryMessageResult qr = store.queryMessage(parts[0], parts[1], 64, 0, Long.MAX_VALUE);
            // Distinct: after an abnormal recovery RocketMQ indexes the last indexed message again (its
            // `offset < endPhyOffset` rule lets the equal offset through) and returns it twice.
            TreeSet<Long> phys = new TreeSet<>();
            for (SelectMappedBufferResult r : qr.getMessageMapedList()) {
                phys.add(r.getStartOffset());
            }
            qr.release();
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("type", "key");
            o.put("topic", parts[0]);
            o.put("key", parts[1]);
            o.put("physicalOffsets", new ArrayList<>(phys));
            lines.add(Json.write(o));
        }

        for (Map.Entry<String, TreeSet<Integer>> e : queues.entrySet()) {
            for (int q : e.getValue()) {
                String topic = e.getKey();
                long lo = store.getMinOffsetInQueue(topic, q);
                long hi = store.getMaxOffsetInQueue(topic, q);
                TreeSet<Long> stamps = new TreeSet<>();
                for (long i = lo; i < hi; i++) {
                    stamps.add(store.getMessageStoreTimeStamp(topic, q, i));
                }
                if (stamps.isEmpty()) {
                    continue;
                }
                List<Long> probes = new ArrayList<>();
                probes.add(stamps.first() - 1);
                probes.addAll(stamps);
                probes.add(stamps.last() + 1);
                for (long ts : probes) {
                    Map<String, Object> o = new LinkedHashMap<>();
                    o.put("type", "time");
                    o.put("topic", topic);
                    o.put("queueId", q);
                    o.put("timestamp", ts);
                    o.put("lower", store.getOffsetInQueueByTime(topic, q, ts, BoundaryType.LOWER));
                    o.put("upper", store.getOffsetInQueueByTime(topic, q, ts, BoundaryType.UPPER));
                    lines.add(Json.write(o));
                }
            }
        }
        store.shutdown();
        Files.write(Paths.get(out), (String.join("\n", lines) + "\n").getBytes(StandardCharsets.UTF_8));
    }

    // -- vectors: spec section 16's reference records, written by the real store ----------------------------

    /**
     * Writes the reference records of spec section 16 through {@code DefaultMessageStore.putMessage} with the
     * spec's inputs (duplicationEnable keeps their store timestamp and QUEUEOFFSET 5) and
     * prints one line per record: its name, physical offset and bytes in hex, and its consume-queue entry.
     */
    static void vectors(String dir, String out) throws Exception {
        List<String> lines = new ArrayList<>();
        String v2Topic = "abc".repeat(67).substring(0, 200);
        Object[][] plain = {
            {"A", "TopicTest", "192.168.0.1", "10.0.0.2", "Hello RocketMQ", true},
            {"B", "TopicTest", "2001:db8::1", "10.0.0.2", "Hello RocketMQ", true},
            {"S", "TopicTest", "192.168.0.1", "2001:db8::2", "Hello RocketMQ", true},
            {"BS", "TopicTest", "2001:db8::1", "2001:db8::2", "Hello RocketMQ", true},
            {"C", v2Topic, "192.168.0.1", "10.0.0.2", "Hello RocketMQ", true},
        };
        Object[][] withCrcD = {
            {"D", "TopicTest", "192.168.0.1", "10.0.0.2", "Hello RocketMQ", true},
        };
        Object[][] withCrcE = {
            {"E", "TopicTest", "192.168.0.1", "10.0.0.2", "", false},
        };
        // D and E each get a store of their own: at physical offset 0, as in the spec (their CRC covers it).
        Object[][][] stores = {plain, withCrcD, withCrcE};
        for (int round = 0; round < stores.length; round++) {
            MessageStoreConfig config = new MessageStoreConfig();
            config.setDuplicationEnable(true); // keeps the message's own store timestamp
            config.setEnabledAppendPropCRC(round > 0);
            DefaultMessageStore store = open(dir + File.separator + "store-" + round, config);
            for (Object[] v : stores[round]) {
                String topic = (String) v[1];
                MessageExtBrokerInner msg = new MessageExtBrokerInner();
                msg.setTopic(topic);
                msg.setQueueId(3);
                msg.setBody(((String) v[4]).getBytes(StandardCharsets.UTF_8));
                msg.setBornTimestamp(1700000000000L);
                msg.setStoreTimestamp(1700000000123L);
                msg.setBornHost(host((String) v[2], 54321));
                msg.setStoreHost(host((String) v[3], 10911));
                if (msg.getBornHost() instanceof InetSocketAddress a && a.getAddress() instanceof Inet6Address) {
                    msg.setBornHostV6Flag();
                }
                if (msg.getStoreHost() instanceof InetSocketAddress a && a.getAddress() instanceof Inet6Address) {
                    msg.setStoreHostAddressV6Flag();
                }
                if (topic.length() > Byte.MAX_VALUE) {
                    msg.setVersion(MessageVersion.MESSAGE_VERSION_V2);
                }
                // The broker decodes a producer's properties into HashMap(128), in the producer's order.
                Map<String, String> props = new java.util.HashMap<>(128);
                if ((Boolean) v[5]) {
                    props.put("UNIQ_KEY", "C0A80001A1B218B4AAC2000000000000");
                    props.put("WAIT", "true");
                    props.put("TAGS", "TagA");
                    props.put("KEYS", "order1 order2");
                    props.put("CLUSTER", "DefaultCluster");
                }
                MessageAccessor.setProperties(msg, props);
                msg.setPropertiesString(MessageDecoder.messageProperties2String(props));
                msg.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(msg.getTags()));
                // duplicationEnable also keeps the message's own queue offset instead of assigning one.
                msg.setQueueOffset(5);
                PutMessageResult r = store.putMessage(msg);
                if (!r.isOk()) {
                    throw new IllegalStateException("vector " + v[0] + ": " + r.getPutMessageStatus());
                }
                long offset = r.getAppendMessageResult().getWroteOffset();
                int size = r.getAppendMessageResult().getWroteBytes();
                SelectMappedBufferResult rec = store.getCommitLog().getMessage(offset, size);
                byte[] bytes = new byte[size];
                rec.getByteBuffer().get(bytes);
                rec.release();
                // With duplicationEnable the reput service dispatches only up to the confirm offset.
                store.setConfirmOffset(store.getMaxPhyOffset());
                waitDispatched(store);
                ConsumeQueueInterface q = store.getConsumeQueue(topic, 3);
                CqUnit u = q.get(5);
                if (u == null) {
                    throw new IllegalStateException("vector " + v[0] + ": no consume-queue entry 5; queue holds "
                        + q.getMinOffsetInQueue() + ".." + q.getMaxOffsetInQueue());
                }
                ByteBuffer cq = ByteBuffer.allocate(20).putLong(u.getPos()).putInt(u.getSize()).putLong(u.getTagsCode());
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("name", v[0]);
                o.put("physicalOffset", offset);
                o.put("record", hex(bytes));
                o.put("cqEntry", hex(cq.array()));
                o.put("offsetMsgId", r.getAppendMessageResult().getMsgId());
                lines.add(Json.write(o));
            }
            store.shutdown();
        }
        Files.write(Paths.get(out), (String.join("\n", lines) + "\n").getBytes(StandardCharsets.UTF_8));
    }

    // -- clean -----------------------------------------------------------------------------------------------

    /**
     * RocketMQ's own expired-file cleanup on the store: {@code fileReservedTime = 0} (every segment but the
     * active one is expired), a manual request ({@code executeDeleteFilesManually}), then one run each of the
     * store's {@code CleanCommitLogService} (deleting at most {@code batch} segments) and
     * {@code CleanConsumeQueueService}, called as its scheduler calls them.
     */
    static void clean(String dir, int batch) throws Exception {
        MessageStoreConfig config = new MessageStoreConfig();
        config.setFileReservedTime(0);
        config.setDeleteFileBatchMax(batch);
        config.setDeleteCommitLogFilesInterval(0);
        config.setDeleteConsumeQueueFilesInterval(0);
        DefaultMessageStore store = open(dir, config);
        long before = store.getMinPhyOffset();
        store.executeDeleteFilesManually();
        for (String name : new String[] {"cleanCommitLogService", "cleanConsumeQueueService"}) {
            java.lang.reflect.Field f = DefaultMessageStore.class.getDeclaredField(name);
            f.setAccessible(true);
            Object service = f.get(store);
            java.lang.reflect.Method run = service.getClass().getDeclaredMethod("run");
            run.setAccessible(true);
            run.invoke(service);
        }
        if (store.getMinPhyOffset() <= before) {
            throw new IllegalStateException("RocketMQ's cleanup deleted nothing (min offset " + before + ")");
        }
        store.shutdown();
    }

    // -- answers ---------------------------------------------------------------------------------------------

    /**
     * Runs each probe of {@code probesFile} against the store, in order, and writes one JSON line per probe:
     * {@code {"call":s,"topic":s,"queueId":I,"arg":L,"result":...}}. A probe line is {@code call topicHex queueId
     * arg}: {@code get} (getMessage from offset arg, 32 messages, no filter; result: status, nextBeginOffset,
     * minOffset, maxOffset, count), {@code min}, {@code max} (getMin/MaxOffsetInQueue), {@code lower},
     * {@code upper} (getOffsetInQueueByTime at timestamp arg), {@code phys} (getCommitLogOffsetInQueue at queue
     * offset arg), {@code time} (getMessageStoreTimeStamp at queue offset arg).
     */
    static void answers(String dir, String probesFile, String out) throws Exception {
        DefaultMessageStore store = open(dir);
        List<String> lines = new ArrayList<>();
        for (String probe : Files.readAllLines(Path.of(probesFile), StandardCharsets.UTF_8)) {
            if (probe.isBlank()) {
                continue;
            }
            String[] f = probe.split(" ");
            String topic = new String(java.util.HexFormat.of().parseHex(f[1]), StandardCharsets.UTF_8);
            int q = Integer.parseInt(f[2]);
            long arg = Long.parseLong(f[3]);
            Object result;
            switch (f[0]) {
                case "get": {
                    GetMessageResult r = store.getMessage(READ_GROUP, topic, q, arg, 32, null);
                    Map<String, Object> o = new LinkedHashMap<>();
                    o.put("status", r.getStatus().name());
                    o.put("nextBeginOffset", r.getNextBeginOffset());
                    o.put("minOffset", r.getMinOffset());
                    o.put("maxOffset", r.getMaxOffset());
                    o.put("count", r.getMessageCount());
                    r.release();
                    result = o;
                    break;
                }
                case "min":
                    result = store.getMinOffsetInQueue(topic, q);
                    break;
                case "max":
                    result = store.getMaxOffsetInQueue(topic, q);
                    break;
                case "lower":
                case "upper":
                    // RocketMQ's own binary search can throw on a queue its cleanup emptied: reported, not fatal.
                    try {
                        result = store.getOffsetInQueueByTime(topic, q, arg,
                            f[0].equals("lower") ? BoundaryType.LOWER : BoundaryType.UPPER);
                    } catch (java.nio.BufferUnderflowException e) {
                        result = "exception " + e.getClass().getName();
                    }
                    break;
                case "phys":
                    result = store.getCommitLogOffsetInQueue(topic, q, arg);
                    break;
                case "time":
                    result = store.getMessageStoreTimeStamp(topic, q, arg);
                    break;
                default:
                    throw new IllegalArgumentException("unknown probe " + f[0]);
            }
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("call", f[0]);
            o.put("topic", topic);
            o.put("queueId", q);
            o.put("arg", arg);
            o.put("result", result);
            lines.add(Json.write(o));
        }
        Files.write(Paths.get(out), (String.join("\n", lines) + "\n").getBytes(StandardCharsets.UTF_8));
        store.shutdown();
    }

    // -- consumerOffset.json --------------------------------------------------------------------------------

    static void commit(ConsumerOffsetManager m, String topicAtGroup, int queueId, long offset) {
        m.getOffsetTable().computeIfAbsent(topicAtGroup, k -> new ConcurrentHashMap<>(32)).put(queueId, offset);
    }

    static void offsetsWrite(String file) throws IOException {
        ConsumerOffsetManager m = new ConsumerOffsetManager();
        commit(m, "TopicTest@GID_A", 0, 250);
        commit(m, "TopicTest@GID_A", 1, 250);
        commit(m, "TopicTest@GID_A", 2, 249);
        commit(m, "TopicTest@GID_A", 3, 251);
        commit(m, "%RETRY%GID_A@GID_A", 0, 0);
        commit(m, "Orders@G2", 100, 7);
        m.getDataVersion().nextVersion();
        Files.write(Paths.get(file), m.encode(true).getBytes(StandardCharsets.UTF_8));
    }

    static void offsetsRead(String file, String out) throws IOException {
        ConsumerOffsetManager m = new ConsumerOffsetManager();
        m.decode(new String(Files.readAllBytes(Path.of(file)), StandardCharsets.UTF_8));
        Map<String, Object> table = new TreeMap<>();
        for (Map.Entry<String, ConcurrentMap<Integer, Long>> e : m.getOffsetTable().entrySet()) {
            Map<String, Object> q = new TreeMap<>();
            for (Map.Entry<Integer, Long> qe : e.getValue().entrySet()) {
                q.put(String.valueOf(qe.getKey()), qe.getValue());
            }
            table.put(e.getKey(), q);
        }
        Files.write(Paths.get(out), Json.write(table).getBytes(StandardCharsets.UTF_8));
    }

    /** The few JSON shapes the harness prints: maps, lists, strings, numbers. */
    static final class Json {
        static String write(Object v) {
            StringBuilder s = new StringBuilder();
            write(s, v);
            return s.toString();
        }

        static void write(StringBuilder s, Object v) {
            if (v instanceof Map<?, ?> map) {
                s.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : map.entrySet()) {
                    if (!first) {
                        s.append(',');
                    }
                    first = false;
                    string(s, String.valueOf(e.getKey()));
                    s.append(':');
                    write(s, e.getValue());
                }
                s.append('}');
            } else if (v instanceof List<?> list) {
                s.append('[');
                for (int i = 0; i < list.size(); i++) {
                    if (i > 0) {
                        s.append(',');
                    }
                    write(s, list.get(i));
                }
                s.append(']');
            } else if (v instanceof String str) {
                string(s, str);
            } else if (v instanceof Number || v instanceof Boolean) {
                s.append(v);
            } else if (v == null) {
                s.append("null");
            } else {
                throw new IllegalArgumentException("cannot write " + v.getClass());
            }
        }

        static void string(StringBuilder s, String str) {
            s.append('"');
            for (int i = 0; i < str.length(); i++) {
                char c = str.charAt(i);
                if (c == '"' || c == '\\') {
                    s.append('\\').append(c);
                } else if (c < 0x20) {
                    s.append(String.format("\\u%04x", (int) c));
                } else {
                    s.append(c);
                }
            }
            s.append('"');
        }
    }
}
