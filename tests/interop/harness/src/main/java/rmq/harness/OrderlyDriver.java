package rmq.harness;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.store.LocalFileOffsetStore;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * RocketMQ 5.3.1's client-side {@code LocalFileOffsetStore} (a broadcasting consumer's own offsets), for rmq's
 * interop tests (tests/test_local_offsets.py). Run with {@code -Drocketmq.client.localOffsetStoreDir=DIR}; the
 * file is {@code DIR/CLIENT_ID/GROUP/offsets.json}. Lines of IN and OUT are {@code topic TAB broker TAB queueId TAB
 * offset}.
 *
 * <ul>
 *   <li>{@code write CLIENT_ID GROUP IN}: a new store {@code load()}s the file (as a starting consumer does),
 *       {@code updateOffset}s each line in order, then {@code persistAll}s every queue it holds (which merges
 *       what the file holds).</li>
 *   <li>{@code read CLIENT_ID GROUP OUT}: a new store {@code load()}s the file and writes its table.</li>
 * </ul>
 */
public final class OrderlyDriver {
    private OrderlyDriver() {
    }

    public static void main(String[] args) throws Exception {
        int status;
        try {
            status = run(args);
        } catch (Throwable t) {
            t.printStackTrace();
            status = 1;
        }
        System.out.flush();
        System.exit(status);
    }

    static LocalFileOffsetStore store(String clientId, String group) {
        MQClientInstance client = new MQClientInstance(new ClientConfig(), 0, clientId);
        return new LocalFileOffsetStore(client, group);
    }

    static int run(String[] args) throws Exception {
        String command = args[0];
        LocalFileOffsetStore store = store(args[1], args[2]);
        switch (command) {
            case "write": {
                store.load();
                Set<MessageQueue> mqs = new HashSet<>(store.cloneOffsetTable(null).keySet());
                for (String line : Files.readAllLines(Paths.get(args[3]), StandardCharsets.UTF_8)) {
                    if (line.isEmpty()) {
                        continue;
                    }
                    String[] f = line.split("\t", -1);
                    MessageQueue mq = new MessageQueue(f[0], f[1], Integer.parseInt(f[2]));
                    store.updateOffset(mq, Long.parseLong(f[3]), false);
                    mqs.add(mq);
                }
                store.persistAll(mqs);
                return 0;
            }
            case "read": {
                store.load();
                List<String> out = new ArrayList<>();
                for (Map.Entry<MessageQueue, Long> e : store.cloneOffsetTable(null).entrySet()) {
                    MessageQueue mq = e.getKey();
                    out.add(mq.getTopic() + "\t" + mq.getBrokerName() + "\t" + mq.getQueueId() + "\t" + e.getValue());
                }
                Files.write(Paths.get(args[3]), out, StandardCharsets.UTF_8);
                return 0;
            }
            default:
                throw new IllegalArgumentException("usage: OrderlyDriver write|read CLIENT_ID GROUP FILE");
        }
    }
}
