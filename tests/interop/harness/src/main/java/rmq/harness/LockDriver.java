package rmq.harness;

import java.io.File;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.charset.StandardCharsets;

import org.apache.rocketmq.store.DefaultMessageStore;

/**
 * RocketMQ's store lock, for rmq's lock interop tests (tests/test_lock_interop.py). Each command prints one line.
 *
 * <ul>
 *   <li>{@code hold DIR}: takes the lock exactly as {@code DefaultMessageStore} does (its constructor opens
 *       {@code DIR/lock} with {@code new RandomAccessFile(file, "rw")}; {@code start()} calls
 *       {@code tryLock(0, 1, false)}, refuses a null, shared or invalid lock, writes {@code lock} and forces it),
 *       prints {@code locked} and holds it until stdin closes; prints {@code refused} and exits 3 if it cannot.</li>
 *   <li>{@code try DIR}: the same {@code tryLock}; prints {@code acquired} (and releases it) or {@code refused}.</li>
 *   <li>{@code start DIR}: a real {@code DefaultMessageStore} (the harness's settings) {@code load()} and
 *       {@code start()}; prints {@code started} (and shuts it down) or {@code start failed: MESSAGE}.</li>
 * </ul>
 */
public final class LockDriver {
    private LockDriver() {
    }

    public static void main(String[] args) throws Exception {
        int status;
        try {
            status = run(args[0], args[1]);
        } catch (Throwable t) {
            t.printStackTrace();
            status = 1;
        }
        System.out.flush();
        // The store's non-daemon threads would keep the JVM alive.
        System.exit(status);
    }

    static int run(String command, String dir) throws Exception {
        switch (command) {
            case "hold":
                return hold(dir);
            case "try":
                return tryOnce(dir);
            case "start":
                return start(dir);
            default:
                throw new IllegalArgumentException("usage: LockDriver hold|try|start DIR");
        }
    }

    /** DefaultMessageStore's lock: a null, shared or invalid lock counts as refused. */
    static FileLock lock(FileChannel channel) throws Exception {
        FileLock lock = channel.tryLock(0, 1, false);
        if (lock == null || lock.isShared() || !lock.isValid()) {
            return null;
        }
        return lock;
    }

    static int hold(String dir) throws Exception {
        try (RandomAccessFile file = new RandomAccessFile(new File(dir, "lock"), "rw")) {
            FileChannel channel = file.getChannel();
            FileLock lock = lock(channel);
            if (lock == null) {
                System.out.println("refused");
                return 3;
            }
            channel.write(ByteBuffer.wrap("lock".getBytes(StandardCharsets.UTF_8)));
            channel.force(true);
            System.out.println("locked");
            System.out.flush();
            while (System.in.read() >= 0) {
                // hold until the test closes our stdin
            }
            lock.release();
            return 0;
        }
    }

    static int tryOnce(String dir) throws Exception {
        try (RandomAccessFile file = new RandomAccessFile(new File(dir, "lock"), "rw")) {
            FileLock lock = lock(file.getChannel());
            System.out.println(lock == null ? "refused" : "acquired");
            if (lock != null) {
                lock.release();
            }
            return 0;
        }
    }

    static int start(String dir) throws Exception {
        DefaultMessageStore store;
        try {
            store = Harness.open(dir);
        } catch (RuntimeException e) {
            System.out.println("start failed: " + e.getMessage());
            return 0;
        }
        System.out.println("started");
        store.shutdown();
        return 0;
    }
}
