package rmq.bench;

import java.io.File;
import java.lang.management.ManagementFactory;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * Times Apache RocketMQ 5.3.1's {@code DefaultMessageStore.load()} on the store in {@code args[0]}: the
 * commitlog, consume queues, checkpoint and index loaded and recovered (normal after a clean shutdown,
 * abnormal when the abort file is there), with RocketMQ's defaults (1 GiB segments, checkCRCOnRecover on,
 * ASYNC_FLUSH). Prints one JSON line: whether the store was shut down cleanly, the seconds taken by the
 * constructor and by {@code load()}, the process's CPU time over both (user + system, every thread) and the
 * commitlog's min and max offset after recovery. The store is not
 * started and not shut down (the process exits): run it on a copy.
 */
public final class RecoveryLoad {
    private RecoveryLoad() {
    }

    public static void main(String[] args) throws Exception {
        String dir = args[0];
        boolean clean = !new File(dir, "abort").exists();
        MessageStoreConfig config = new MessageStoreConfig();
        config.setStorePathRootDir(dir);
        config.setStorePathCommitLog(dir + File.separator + "commitlog");
        config.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);
        config.setHaListenPort(0);
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long c0 = os.getProcessCpuTime();
        long t0 = System.nanoTime();
        DefaultMessageStore store = new DefaultMessageStore(config, new BrokerStatsManager("bench", true),
            (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap, properties) -> { },
            new BrokerConfig(), new ConcurrentHashMap<>());
        long t1 = System.nanoTime();
        boolean ok = store.load();
        long t2 = System.nanoTime();
        long c2 = os.getProcessCpuTime();
        System.out.printf("{\"ok\": %s, \"clean\": %s, \"construct_seconds\": %.6f, \"load_seconds\": %.6f, "
                + "\"cpu_seconds\": %.6f, \"min_offset\": %d, \"max_offset\": %d}%n",
            ok, clean, (t1 - t0) / 1e9, (t2 - t1) / 1e9, (c2 - c0) / 1e9, store.getMinPhyOffset(),
            store.getMaxPhyOffset());
        System.out.flush();
        Runtime.getRuntime().halt(ok ? 0 : 1);
    }
}
