package rmq.harness;

import java.io.File;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.schedule.DelayOffsetSerializeWrapper;
import org.apache.rocketmq.broker.schedule.ScheduleMessageService;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.DataVersion;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.stats.BrokerStatsManager;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * RocketMQ 5.3.1's delay levels, for rmq's schedule interop tests (tests/test_schedule_interop.py).
 *
 * <p>A {@link BrokerController} is built from the store's {@link MessageStoreConfig} (never started: no
 * network), given the harness's {@link DefaultMessageStore} ({@code setMessageStore}) and its put hooks
 * ({@code registerMessageStoreHook}: {@code HookUtils.handleScheduleMessage} among them), so puts and the
 * {@link ScheduleMessageService} run exactly as in a broker.
 *
 * <ul>
 *   <li>{@code put DIR LEVELS SPEC}: for each line of SPEC ({@code topic \t queueId \t tags \t keys \t
 *       name=value;... \t bornTimestamp \t body}, {@code -} for none; the properties include DELAY and
 *       UNIQ_KEY), builds the message as a producer ({@code new Message(topic, tags, keys, body)}, then the
 *       properties) and the broker ({@code string2messageProperties} of the producer's string, CLUSTER added,
 *       re-serialized) build it, and {@code putMessage}s it; prints {@code ok TOPIC QUEUE} or
 *       {@code error EXCEPTION} per line.</li>
 *   <li>{@code deliver DIR LEVELS TIMEOUT_MS}: starts the ScheduleMessageService (it loads
 *       {@code config/delayOffset.json}), waits until every level's offset reached its queue's max offset,
 *       shuts it down (it persists the file) and prints {@code delivered} or {@code timeout}.</li>
 *   <li>{@code live DIR LEVELS COUNT RATE}: starts the ScheduleMessageService, puts COUNT messages to topic
 *       {@code Delayed} (queue i % 4, DELAY 1 + i % 3, property {@code seq} = i, 100-byte body) at RATE puts
 *       per second from one thread while it delivers, waits until everything is delivered and shuts down: the
 *       run behind rmq's lateness benchmark (benches/delay_lateness.py).</li>
 *   <li>{@code delay-encode FILE COUNTER TIMESTAMP LEVEL:OFFSET,...}: writes
 *       {@code DelayOffsetSerializeWrapper.toJson(true)} for a {@code ConcurrentHashMap(32)} filled in order.</li>
 *   <li>{@code delay-reencode IN OUT}: {@code ScheduleMessageService.decode} of IN, then {@code encode(true)} to
 *       OUT; prints {@code LEVEL OFFSET} per entry and {@code version COUNTER TIMESTAMP}.</li>
 * </ul>
 */
public final class ScheduleDriver {
    private ScheduleDriver() {
    }

    public static void main(String[] args) throws Exception {
        int status = 0;
        try {
            switch (args[0]) {
                case "put":
                    put(args[1], args[2], args[3]);
                    break;
                case "deliver":
                    status = deliver(args[1], args[2], Long.parseLong(args[3]));
                    break;
                case "live":
                    status = live(args[1], args[2], Integer.parseInt(args[3]), Double.parseDouble(args[4]));
                    break;
                case "delay-encode":
                    delayEncode(args[1], Long.parseLong(args[2]), Long.parseLong(args[3]), args.length > 4 ? args[4] : "");
                    break;
                case "delay-reencode":
                    delayReencode(args[1], args[2]);
                    break;
                default:
                    throw new IllegalArgumentException("unknown command " + args[0]);
            }
        } catch (Throwable t) {
            t.printStackTrace();
            status = 1;
        }
        System.out.flush();
        System.exit(status); // the store's and the controller's non-daemon threads would keep the JVM alive
    }

    static MessageStoreConfig config(String levels) {
        MessageStoreConfig config = new MessageStoreConfig();
        config.setMessageDelayLevel(levels);
        return config;
    }

    /** A broker around the harness's store, never started. */
    static BrokerController broker(MessageStoreConfig config, DefaultMessageStore store) {
        BrokerController bc = new BrokerController(new BrokerConfig(), new NettyServerConfig(), new NettyClientConfig(), config);
        bc.setMessageStore(store);
        bc.registerMessageStoreHook();
        return bc;
    }

    static String orNull(String field) {
        return "-".equals(field) ? null : field;
    }

    static void put(String dir, String levels, String spec) throws Exception {
        MessageStoreConfig config = config(levels);
        DefaultMessageStore store = Harness.open(dir, config);
        BrokerController bc = broker(config, store);
        if (!bc.getScheduleMessageService().parseDelayLevel()) {
            throw new IllegalStateException("parseDelayLevel failed for " + levels);
        }
        InetSocketAddress born = Harness.host("10.0.0.1", 5555);
        InetSocketAddress storeHost = Harness.host("10.0.0.2", 10911);
        for (String line : Files.readAllLines(Paths.get(spec), StandardCharsets.UTF_8)) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            byte[] body = f[6].getBytes(StandardCharsets.UTF_8);
            // The producer: Message(topic, tags, keys, body), then each property as setDelayTimeLevel and
            // setUniqID put theirs.
            Message client = new Message(f[0], orNull(f[2]), orNull(f[3]), body);
            if (!f[4].isEmpty()) {
                for (String kv : f[4].split(";")) {
                    int eq = kv.indexOf('=');
                    MessageAccessor.putProperty(client, kv.substring(0, eq), kv.substring(eq + 1));
                }
            }
            String clientProps = MessageDecoder.messageProperties2String(client.getProperties());
            // The broker (SendMessageProcessor): the producer's string parsed into HashMap(128), CLUSTER added.
            MessageExtBrokerInner msg = new MessageExtBrokerInner();
            msg.setTopic(f[0]);
            msg.setQueueId(Integer.parseInt(f[1]));
            msg.setBody(body);
            msg.setFlag(0);
            MessageAccessor.setProperties(msg, MessageDecoder.string2messageProperties(clientProps));
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_CLUSTER, "DefaultCluster");
            msg.setPropertiesString(MessageDecoder.messageProperties2String(msg.getProperties()));
            msg.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(msg.getTags()));
            msg.setBornTimestamp(Long.parseLong(f[5]));
            msg.setBornHost(born);
            msg.setStoreHost(storeHost);
            try {
                PutMessageResult r = store.putMessage(msg);
                System.out.println(r.isOk() ? "ok " + msg.getTopic() + " " + msg.getQueueId()
                    : "status " + r.getPutMessageStatus());
            } catch (RuntimeException e) {
                System.out.println("error " + e.getClass().getSimpleName());
            }
        }
        Harness.waitDispatched(store);
        store.shutdown();
    }

    static int live(String dir, String levels, int count, double rate) throws Exception {
        // A broker's defaults (index sizes, consume queues), 64 MiB commitlog segments, as the rmq side has.
        MessageStoreConfig config = config(levels);
        config.setStorePathRootDir(dir);
        config.setStorePathCommitLog(dir + File.separator + "commitlog");
        config.setMappedFileSizeCommitLog(64 << 20);
        config.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);
        config.setHaListenPort(0);
        DefaultMessageStore store = new DefaultMessageStore(config, new BrokerStatsManager("bench", true),
            (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap, properties) -> { },
            new BrokerConfig(), new ConcurrentHashMap<>());
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed for " + dir);
        }
        store.start();
        BrokerController bc = broker(config, store);
        ScheduleMessageService sms = bc.getScheduleMessageService();
        sms.start();
        InetSocketAddress born = Harness.host("10.0.0.1", 5555);
        InetSocketAddress storeHost = Harness.host("10.0.0.2", 10911);
        byte[] body = new byte[100];
        long start = System.nanoTime();
        for (int i = 0; i < count; i++) {
            MessageExtBrokerInner msg = new MessageExtBrokerInner();
            msg.setTopic("Delayed");
            msg.setQueueId(i % 4);
            msg.setBody(body);
            MessageAccessor.putProperty(msg, "seq", Integer.toString(i));
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_DELAY_TIME_LEVEL, Integer.toString(1 + i % 3));
            msg.setPropertiesString(MessageDecoder.messageProperties2String(msg.getProperties()));
            msg.setTagsCode(0);
            msg.setBornTimestamp(System.currentTimeMillis());
            msg.setBornHost(born);
            msg.setStoreHost(storeHost);
            PutMessageResult r = store.putMessage(msg);
            if (!r.isOk()) {
                throw new IllegalStateException("put " + i + ": " + r.getPutMessageStatus());
            }
            long pause = start + (long) ((i + 1) * 1e9 / rate) - System.nanoTime();
            if (pause > 0) {
                Thread.sleep(pause / 1_000_000, (int) (pause % 1_000_000));
            }
        }
        long deadline = System.currentTimeMillis() + 60_000;
        long delivered = 0;
        while (System.currentTimeMillis() < deadline) {
            delivered = 0;
            for (int q = 0; q < 4; q++) {
                delivered += store.getMaxOffsetInQueue("Delayed", q);
            }
            if (delivered >= count) {
                break;
            }
            Thread.sleep(50);
        }
        sms.shutdown();
        store.shutdown();
        System.out.println(delivered >= count ? "delivered" : "timeout");
        return 0;
    }

    static int deliver(String dir, String levels, long timeoutMs) throws Exception {
        MessageStoreConfig config = config(levels);
        DefaultMessageStore store = Harness.open(dir, config);
        BrokerController bc = broker(config, store);
        ScheduleMessageService sms = bc.getScheduleMessageService();
        sms.start();
        long deadline = System.currentTimeMillis() + timeoutMs;
        boolean done = false;
        while (!done && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
            HashMap<String, String> stats = new HashMap<>();
            sms.buildRunningStats(stats);
            done = true;
            for (int level = 1; level <= sms.getMaxDelayLevel(); level++) {
                long max = store.getMaxOffsetInQueue("SCHEDULE_TOPIC_XXXX", level - 1);
                Long at = sms.getOffsetTable().get(level);
                if (max > 0 && (at == null || at < max)) {
                    done = false;
                }
            }
        }
        Harness.waitDispatched(store);
        sms.shutdown();
        store.shutdown();
        System.out.println(done ? "delivered" : "timeout");
        return 0;
    }

    static void delayEncode(String file, long counter, long timestamp, String entries) throws Exception {
        ConcurrentMap<Integer, Long> table = new ConcurrentHashMap<>(32);
        if (!entries.isEmpty()) {
            for (String e : entries.split(",")) {
                String[] lo = e.split(":");
                table.put(Integer.parseInt(lo[0]), Long.parseLong(lo[1]));
            }
        }
        DataVersion v = new DataVersion();
        v.setCounter(new AtomicLong(counter));
        v.setTimestamp(timestamp);
        DelayOffsetSerializeWrapper w = new DelayOffsetSerializeWrapper();
        w.setOffsetTable(table);
        w.setDataVersion(v);
        Files.write(Paths.get(file), w.toJson(true).getBytes(StandardCharsets.UTF_8));
    }

    static void delayReencode(String in, String out) throws Exception {
        String dir = Files.createTempDirectory("rmq-sched").toString();
        MessageStoreConfig config = config("1s");
        config.setStorePathRootDir(dir);
        BrokerController bc = new BrokerController(new BrokerConfig(), new NettyServerConfig(), new NettyClientConfig(), config);
        ScheduleMessageService sms = new ScheduleMessageService(bc);
        sms.decode(new String(Files.readAllBytes(Paths.get(in)), StandardCharsets.UTF_8));
        for (Map.Entry<Integer, Long> e : sms.getOffsetTable().entrySet()) {
            System.out.println(e.getKey() + " " + e.getValue());
        }
        DataVersion v = sms.getDataVersion();
        System.out.println("version " + v.getCounter().get() + " " + v.getTimestamp());
        Files.write(Paths.get(out), sms.encode(true).getBytes(StandardCharsets.UTF_8));
        new File(dir).delete();
    }
}
