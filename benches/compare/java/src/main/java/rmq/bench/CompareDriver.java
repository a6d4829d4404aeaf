package rmq.bench;

import java.io.File;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.reflect.Field;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.ServiceThread;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * RocketMQ 5.3.1's side of {@code make bench-compare} (benches/compare/run.py defines the workloads and passes
 * them as {@code key=value} arguments; its docstring states the settings). One workload per JVM: a warm-up pass
 * in a store of its own (shut down and deleted after), so the JIT has compiled the path, then the timed pass in a
 * fresh store, left as it is when the process halts (run.py deletes it). Prints one JSON line, with the process's
 * CPU time (user + system, every thread: {@code OperatingSystemMXBean.getProcessCpuTime}) over each timed span.
 *
 * <ul>
 *   <li>{@code put dir=... topic=... queues=4 tag=... size=... count=... batch=1 threads=1 warmup=... segment=...}:
 *       {@code count} messages (message n: queue n % queues, the tag, key "key-n") with {@code putMessage}, or with
 *       {@code putMessages} of a {@code MessageExtBatch} of {@code batch} messages, from {@code threads} threads;
 *       then waits until dispatch has caught up. Prints put_s (first put to last return) and dispatched_s (first
 *       put until the consume queues and index hold everything). {@code flush=SYNC_FLUSH} makes the store
 *       SYNC_FLUSH: each put (WAIT=true) then waits for GroupCommitService's flush.</li>
 *   <li>{@code dispatch dir=... topic=... queues=4 tag=... size=... count=... keys=3 warmup=... segment=...}:
 *       {@code count} single puts with {@code keys} space-separated keys each into a started store whose
 *       ReputMessageService was shut down first (by reflection: the field is private), then the reput is
 *       started again and timed until the consume queues and index have caught up (dispatch_s).</li>
 *   <li>{@code read dir=... topic=... queues=4 tag=... size=... count=... queries=... segment=...}: fills a store
 *       with {@code count} single puts (not timed beyond build_s), waits for dispatch, drains every queue with
 *       {@code getMessage} of 32 (once to warm up, once timed: drain_s), then queries {@code queries} keys with
 *       {@code queryMessage} (all once to warm up, then each timed: query median and p99 in µs).</li>
 * </ul>
 */
public final class CompareDriver {
    private static final InetSocketAddress BORN = new InetSocketAddress("127.0.0.1", 0);
    private static final InetSocketAddress STORE_HOST = new InetSocketAddress("127.0.0.1", 10911);
    private static final int PULL_BATCH = 32;

    private final Map<String, String> args;
    private final String topic;
    private final String tag;
    private final int queues;
    private final byte[] body;
    private final int keysPerMessage;

    private CompareDriver(Map<String, String> args) {
        this.args = args;
        this.topic = args.get("topic");
        this.tag = args.get("tag");
        this.queues = intArg("queues");
        this.keysPerMessage = args.containsKey("keys") ? intArg("keys") : 1;
        this.body = new byte[intArg("size")];
        for (int i = 0; i < body.length; i++) {
            body[i] = (byte) ('a' + i % 26);
        }
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (String a : Arrays.copyOfRange(argv, 1, argv.length)) {
            int eq = a.indexOf('=');
            args.put(a.substring(0, eq), a.substring(eq + 1));
        }
        CompareDriver d = new CompareDriver(args);
        String out;
        switch (argv[0]) {
            case "put":
                out = d.put();
                break;
            case "read":
                out = d.read();
                break;
            case "dispatch":
                out = d.dispatch();
                break;
            default:
                throw new IllegalArgumentException("unknown command " + argv[0]);
        }
        System.out.println(out);
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }

    /** The process's CPU time (user + system, all threads) in seconds. */
    private static double cpu() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime() / 1e9;
    }

    /** Message n's KEYS: "key-n", then "k1-n k2-n ..." up to {@code keys} keys, space separated. */
    private String keys(long n) {
        StringBuilder k = new StringBuilder("key-").append(n);
        for (int i = 1; i < keysPerMessage; i++) {
            k.append(" k").append(i).append('-').append(n);
        }
        return k.toString();
    }

    private int intArg(String name) {
        return Integer.parseInt(args.get(name));
    }

    private DefaultMessageStore open(String dir) throws Exception {
        MessageStoreConfig config = new MessageStoreConfig();
        config.setStorePathRootDir(dir);
        config.setStorePathCommitLog(dir + File.separator + "commitlog");
        config.setMappedFileSizeCommitLog(intArg("segment"));
        config.setFlushDiskType(FlushDiskType.valueOf(args.getOrDefault("flush", "ASYNC_FLUSH")));
        config.setHaListenPort(0);
        DefaultMessageStore store = new DefaultMessageStore(config, new BrokerStatsManager("bench", true),
            (t, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap, properties) -> { },
            new BrokerConfig(), new ConcurrentHashMap<>());
        if (!store.load()) {
            throw new IllegalStateException("load() failed for " + dir);
        }
        store.start();
        return store;
    }

    private static void close(DefaultMessageStore store, String dir) throws IOException {
        store.shutdown();
        try (Stream<Path> walk = Files.walk(Path.of(dir))) {
            walk.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
        }
    }

    private static void waitDispatched(DefaultMessageStore store) throws InterruptedException {
        while (store.dispatchBehindBytes() > 0) {
            Thread.sleep(1);
        }
    }

    /** One message as a broker's SendMessageProcessor builds it from a producer's request. */
    private MessageExtBrokerInner inner(long n) {
        MessageExtBrokerInner msg = new MessageExtBrokerInner();
        msg.setTopic(topic);
        msg.setQueueId((int) (n % queues));
        msg.setBody(body);
        msg.setTags(tag);
        msg.setKeys(keys(n));
        msg.setWaitStoreMsgOK(true);
        MessageClientIDSetter.setUniqID(msg);
        MessageAccessor.putProperty(msg, MessageConst.PROPERTY_CLUSTER, "DefaultCluster");
        msg.setBornTimestamp(System.currentTimeMillis());
        msg.setBornHost(BORN);
        msg.setStoreHost(STORE_HOST);
        msg.setPropertiesString(MessageDecoder.messageProperties2String(msg.getProperties()));
        msg.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(tag));
        return msg;
    }

    /** Messages n, n + 1, ... n + batch - 1 as one traditional batch (to queue (n / batch) % queues). */
    private MessageExtBatch batch(long n, int batch) {
        List<Message> msgs = new ArrayList<>(batch);
        for (int k = 0; k < batch; k++) {
            Message m = new Message(topic, tag, keys(n + k), body);
            MessageClientIDSetter.setUniqID(m);
            msgs.add(m);
        }
        MessageExtBatch b = new MessageExtBatch();
        b.setTopic(topic);
        b.setQueueId((int) ((n / batch) % queues));
        b.setBody(MessageDecoder.encodeMessages(msgs));
        b.setBornTimestamp(System.currentTimeMillis());
        b.setBornHost(BORN);
        b.setStoreHost(STORE_HOST);
        b.setPropertiesString(MessageDecoder.messageProperties2String(b.getProperties()));
        return b;
    }

    private static void check(PutMessageResult r) {
        if (!r.isOk()) {
            throw new IllegalStateException("put: " + r.getPutMessageStatus());
        }
    }

    /** Messages [from, to) from one thread. */
    private void putRange(DefaultMessageStore store, long from, long to, int batch) {
        if (batch == 1) {
            for (long n = from; n < to; n++) {
                check(store.putMessage(inner(n)));
            }
        } else {
            for (long n = from; n < to; n += batch) {
                check(store.putMessages(batch(n, batch)));
            }
        }
    }

    /**
     * {put_s, dispatched_s} of count messages into a fresh store at dir, which is shut down and deleted after
     * when {@code last} is false (the process ends after the last pass: run.py deletes its store).
     */
    private double[] putPass(String dir, long count, boolean last) throws Exception {
        int threads = intArg("threads");
        int batch = intArg("batch");
        DefaultMessageStore store = open(dir);
        long per = count / threads;
        double c0 = cpu();
        long t0 = System.nanoTime();
        if (threads == 1) {
            putRange(store, 0, count, batch);
        } else {
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            List<Future<?>> done = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                long from = t * per;
                done.add(pool.submit(() -> putRange(store, from, from + per, batch)));
            }
            for (Future<?> f : done) {
                f.get();
            }
            pool.shutdown();
        }
        long t1 = System.nanoTime();
        waitDispatched(store);
        long t2 = System.nanoTime();
        double c2 = cpu();
        if (!last) {
            close(store, dir);
        }
        return new double[] {(t1 - t0) / 1e9, (t2 - t0) / 1e9, c2 - c0};
    }

    private String put() throws Exception {
        String dir = args.get("dir");
        putPass(dir + File.separator + "warm", Long.parseLong(args.get("warmup")), false);
        long count = Long.parseLong(args.get("count"));
        double[] s = putPass(dir + File.separator + "timed", count, true);
        return String.format(Locale.ROOT, "{\"count\": %d, \"put_s\": %.6f, \"dispatched_s\": %.6f, "
            + "\"cpu_s\": %.6f}", count, s[0], s[1], s[2]);
    }

    /** The store's ReputMessageService (a private field of DefaultMessageStore). */
    private static ServiceThread reput(DefaultMessageStore store) throws ReflectiveOperationException {
        Field f = DefaultMessageStore.class.getDeclaredField("reputMessageService");
        f.setAccessible(true);
        return (ServiceThread) f.get(store);
    }

    /** {dispatch_s, cpu_s}: count messages put with the reput stopped, then the reput started and timed. */
    private double[] dispatchPass(String dir, long count, boolean last) throws Exception {
        DefaultMessageStore store = open(dir);
        ServiceThread reput = reput(store);
        reput.shutdown();
        putRange(store, 0, count, 1);
        if (store.dispatchBehindBytes() == 0) {
            throw new IllegalStateException("the reput ran while it was stopped");
        }
        double c0 = cpu();
        long t0 = System.nanoTime();
        reput.start();
        waitDispatched(store);
        long t1 = System.nanoTime();
        double c1 = cpu();
        if (store.getMaxOffsetInQueue(topic, 0) * queues < count) {
            throw new IllegalStateException("dispatch did not fill the consume queues");
        }
        if (!last) {
            close(store, dir);
        }
        return new double[] {(t1 - t0) / 1e9, c1 - c0};
    }

    private String dispatch() throws Exception {
        String dir = args.get("dir");
        dispatchPass(dir + File.separator + "warm", Long.parseLong(args.get("warmup")), false);
        long count = Long.parseLong(args.get("count"));
        double[] s = dispatchPass(dir + File.separator + "timed", count, true);
        return String.format(Locale.ROOT, "{\"count\": %d, \"dispatch_s\": %.6f, \"cpu_s\": %.6f}",
            count, s[0], s[1]);
    }

    /** Every message of every queue with getMessage of 32; returns the number read. */
    private long drain(DefaultMessageStore store) {
        long n = 0;
        for (int q = 0; q < queues; q++) {
            long max = store.getMaxOffsetInQueue(topic, q);
            long offset = 0;
            while (offset < max) {
                GetMessageResult r = store.getMessage("bench", topic, q, offset, PULL_BATCH, null);
                n += r.getMessageCount();
                offset = r.getNextBeginOffset();
                r.release();
            }
        }
        return n;
    }

    private String read() throws Exception {
        String dir = args.get("dir") + File.separator + "read";
        long count = Long.parseLong(args.get("count"));
        int queries = intArg("queries");
        DefaultMessageStore store = open(dir);
        long t0 = System.nanoTime();
        putRange(store, 0, count, 1);
        waitDispatched(store);
        double build = (System.nanoTime() - t0) / 1e9;
        if (drain(store) != count) {
            throw new IllegalStateException("the drain did not read every message");
        }
        double c1 = cpu();
        long t1 = System.nanoTime();
        drain(store);
        double drainS = (System.nanoTime() - t1) / 1e9;
        double drainCpu = cpu() - c1;
        String[] keys = new String[queries];
        for (int j = 0; j < queries; j++) {
            keys[j] = "key-" + (j * 7919L) % count;
        }
        for (String k : keys) {
            QueryMessageResult r = store.queryMessage(topic, k, 32, 0, Long.MAX_VALUE);
            if (r.getMessageBufferList().isEmpty()) {
                throw new IllegalStateException("no message for " + k);
            }
            r.release();
        }
        long[] nanos = new long[queries];
        double q0cpu = cpu();
        for (int j = 0; j < queries; j++) {
            long q0 = System.nanoTime();
            QueryMessageResult r = store.queryMessage(topic, keys[j], 32, 0, Long.MAX_VALUE);
            nanos[j] = System.nanoTime() - q0;
            r.release();
        }
        double queryCpu = cpu() - q0cpu;
        Arrays.sort(nanos);
        return String.format(Locale.ROOT, "{\"count\": %d, \"build_s\": %.6f, \"drain_s\": %.6f, "
                + "\"query_median_us\": %.3f, \"query_p99_us\": %.3f, \"drain_cpu_s\": %.6f, "
                + "\"query_cpu_s\": %.6f}",
            count, build, drainS, nanos[queries / 2] / 1e3, nanos[(int) (queries * 0.99)] / 1e3, drainCpu,
            queryCpu);
    }
}
