package rmq.harness;

import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;

import org.apache.rocketmq.store.DefaultMessageStore;

/**
 * A RocketMQ broker's store being written, for rmq's read-only tests (tests/test_read_only_live.py).
 *
 * <p>{@code LiveWriter DIR N}: opens {@code DIR} with a real {@code DefaultMessageStore} (the harness's
 * settings: 64 KiB segments, 8-entry consume-queue files, a 64/128 index), prints {@code started}, then puts N
 * messages to topic {@code Live}, queue 0, body {@code "live-%06d"} repeated to 20-200 bytes, key {@code L<i>},
 * printing {@code put I} every 100 and sleeping 2 ms between puts, so that segments roll and files are
 * created while a reader watches. Then it prints {@code done} and holds the store open until stdin closes,
 * and shuts down cleanly.</p>
 */
public final class LiveWriter {
    private LiveWriter() {
    }

    public static void main(String[] args) throws Exception {
        int status = 0;
        try {
            String dir = args[0];
            int n = Integer.parseInt(args[1]);
            DefaultMessageStore store = Harness.open(dir);
            System.out.println("started");
            System.out.flush();
            InetSocketAddress born = Harness.host("127.0.0.1", 4321);
            InetSocketAddress storeHost = Harness.host("10.0.0.2", 10911);
            for (int i = 0; i < n; i++) {
                String unit = String.format("live-%06d", i);
                StringBuilder body = new StringBuilder();
                for (int k = 0; k < 2 + i % 19; k++) {
                    body.append(unit);
                }
                Harness.put(store, Harness.inner("Live", 0, body.toString().getBytes(StandardCharsets.UTF_8), "t",
                    "L" + i, born, storeHost));
                if (i % 100 == 0) {
                    System.out.println("put " + i);
                    System.out.flush();
                }
            }
            Harness.waitDispatched(store);
            System.out.println("done");
            System.out.flush();
            while (System.in.read() >= 0) {
                // hold the store open until the test closes our stdin
            }
            store.shutdown();
        } catch (Throwable t) {
            t.printStackTrace();
            status = 1;
        }
        System.out.flush();
        System.exit(status);
    }
}
