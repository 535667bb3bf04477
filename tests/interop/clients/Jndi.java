// Java's JNDI DNS provider (com.sun.jndi.dns.DnsContextFactory), as a JVM application
// that asks for records by type sees them. Run as a single-file source program:
//   java Jndi.java dns://127.0.0.1:PORT/ "A|name" "AAAA|name" "SRV|name" "A AAAA|name"
// Several types at once ("A AAAA") make JNDI send one ANY query and keep the asked
// types from the answer. One JSON object per query on stdout, with the first value of
// each type in the order the answer gave them ("first"). "INET|name" asks
// InetAddress.getAllByName (the JVM's own cache, then the system resolver) instead.
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Hashtable;
import java.util.List;
import javax.naming.Context;
import javax.naming.NamingEnumeration;
import javax.naming.NamingException;
import javax.naming.directory.Attribute;
import javax.naming.directory.Attributes;
import javax.naming.directory.DirContext;
import javax.naming.directory.InitialDirContext;

public class Jndi {
    public static void main(String[] args) throws Exception {
        DirContext ctx = null;
        String server = "";
        for (int i = 0; i < args.length; i++) {
            if (args[i].startsWith("dns://")) {
                if (ctx != null) {
                    ctx.close();
                }
                server = args[i];
                ctx = connect(server);
                continue;
            }
            String[] query = args[i].split("\\|", 2);
            String[] types = query[0].split(" ");
            StringBuilder out = new StringBuilder();
            out.append("{\"server\": ").append(quote(server));
            out.append(", \"query\": ").append(quote(args[i]));
            if (query[0].equals("INET")) {
                try {
                    InetAddress[] all = InetAddress.getAllByName(query[1]);
                    out.append(", \"first\": {\"A\": ").append(quote(all[0].getHostAddress()))
                       .append("}");
                } catch (UnknownHostException e) {
                    out.append(", \"error\": ").append(quote(e.getClass().getName()));
                }
                System.out.println(out.append("}"));
                continue;
            }
            try {
                Attributes attrs = ctx.getAttributes(query[1], types);
                StringBuilder firsts = new StringBuilder();
                out.append(", \"records\": {");
                NamingEnumeration<? extends Attribute> all = attrs.getAll();
                boolean first = true;
                while (all.hasMore()) {
                    Attribute attr = all.next();
                    List<String> values = new ArrayList<>();
                    for (int v = 0; v < attr.size(); v++) {
                        values.add(String.valueOf(attr.get(v)));
                    }
                    firsts.append(first ? "" : ", ").append(quote(attr.getID())).append(": ")
                          .append(quote(values.isEmpty() ? "" : values.get(0)));
                    Collections.sort(values);
                    out.append(first ? "" : ", ").append(quote(attr.getID())).append(": [");
                    for (int v = 0; v < values.size(); v++) {
                        out.append(v == 0 ? "" : ", ").append(quote(values.get(v)));
                    }
                    out.append("]");
                    first = false;
                }
                out.append("}, \"first\": {").append(firsts).append("}");
            } catch (NamingException e) {
                out.append(", \"error\": ").append(quote(e.getClass().getName()))
                   .append(", \"message\": ").append(quote(String.valueOf(e.getMessage())));
            }
            System.out.println(out.append("}"));
        }
        if (ctx != null) {
            ctx.close();
        }
    }

    static DirContext connect(String url) throws NamingException {
        Hashtable<String, String> env = new Hashtable<>();
        env.put(Context.INITIAL_CONTEXT_FACTORY, "com.sun.jndi.dns.DnsContextFactory");
        env.put(Context.PROVIDER_URL, url);
        env.put("com.sun.jndi.dns.timeout.initial", "2000");
        env.put("com.sun.jndi.dns.timeout.retries", "3");
        return new InitialDirContext(env);
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
