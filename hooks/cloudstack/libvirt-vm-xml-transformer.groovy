// virt-cpu-policy transformer for the Apache CloudStack KVM agent.
//
// Installed as /usr/share/virt-cpu-policy/cloudstack/libvirt-vm-xml-transformer.groovy; wire it in
// /etc/cloudstack/agent/agent.properties (see docs/integrations.md, "CloudStack"):
//
//   agent.hooks.basedir=/etc/cloudstack/agent/hooks
//   agent.hooks.libvirt_vm_xml_transformer.script=libvirt-vm-xml-transformer.groovy
//   agent.hooks.libvirt_vm_xml_transformer.method=transform
//
// The agent runs this script with a GroovyScriptEngine on agent.hooks.basedir and calls
// transform(logger, xml) on the object it evaluates to, with the domain XML it has just built.
// The XML is piped through `virt-cpu-policy rewrite` (policy: /etc/virt-cpu-policy/policy.toml, else
// the built-in one) and the result is returned. On any failure (binary missing, non-zero exit,
// empty output, timeout, exception) the failure is logged through the agent's logger and the
// ORIGINAL XML is returned: a failing transformer leaves the agent's behaviour unchanged.
//
// Overrides (JVM system property, else environment variable):
//   virt.cpu.policy.bin     / VIRT_CPU_POLICY_BIN      the binary (default /usr/sbin/virt-cpu-policy)
//   virt.cpu.policy.timeout / VIRT_CPU_POLICY_TIMEOUT  seconds before the rewrite is killed (default 10)
//   virt.cpu.policy.policy  / VIRT_CPU_POLICY_POLICY   a policy file, passed as --policy
//
// The domain XML may hold secrets (VNC passwords): it is never logged.

import java.util.concurrent.TimeUnit

class VirtCpuPolicyTransformer {
    static final String DEFAULT_BIN = '/usr/sbin/virt-cpu-policy'
    static final long DEFAULT_TIMEOUT_SECONDS = 10

    static String setting(String property, String env) {
        String v = System.getProperty(property)
        if (v == null || v.trim().isEmpty()) {
            v = System.getenv(env)
        }
        return (v == null || v.trim().isEmpty()) ? null : v.trim()
    }

    // CloudStack passes its log4j Logger; anything else (or null) must not break the transform.
    static void log(Object logger, String level, String message) {
        String line = 'virt-cpu-policy transformer: ' + message
        try {
            if (logger != null) {
                logger."$level"(line)
                return
            }
        } catch (Throwable ignored) {
            // fall through to stderr
        }
        System.err.println(line)
    }

    static Thread daemon(Closure body) {
        Thread t = new Thread(body as Runnable, 'virt-cpu-policy-transformer')
        t.daemon = true
        t.start()
        return t
    }

    String transform(Object logger, String xml) {
        if (xml == null) {
            return xml
        }
        Process proc = null
        try {
            String bin = setting('virt.cpu.policy.bin', 'VIRT_CPU_POLICY_BIN') ?: DEFAULT_BIN
            long timeout = DEFAULT_TIMEOUT_SECONDS
            String t = setting('virt.cpu.policy.timeout', 'VIRT_CPU_POLICY_TIMEOUT')
            if (t != null) {
                try {
                    timeout = Long.parseLong(t)
                } catch (NumberFormatException e) {
                    log(logger, 'warn', "ignoring timeout '${t}': not a number of seconds")
                }
            }
            List<String> cmd = [bin, 'rewrite']
            String policy = setting('virt.cpu.policy.policy', 'VIRT_CPU_POLICY_POLICY')
            if (policy != null) {
                cmd.addAll(['--policy', policy])
            }
            if (!new File(bin).canExecute()) {
                log(logger, 'warn', "${bin} is missing or not executable; the domain XML is left as CloudStack built it")
                return xml
            }

            proc = new ProcessBuilder(cmd).start()
            final Process p = proc
            final byte[] input = xml.getBytes('UTF-8')
            ByteArrayOutputStream out = new ByteArrayOutputStream()
            ByteArrayOutputStream err = new ByteArrayOutputStream()
            // Feed stdin and drain stdout/stderr on their own threads, so neither side can block
            // the other and the timeout below always applies.
            Thread writer = daemon {
                try {
                    p.outputStream.withStream { it.write(input) }
                } catch (IOException ignored) {
                    // the process exited or was killed; its exit status tells
                }
            }
            Thread outReader = daemon { try { out << p.inputStream } catch (IOException ignored) { } }
            Thread errReader = daemon { try { err << p.errorStream } catch (IOException ignored) { } }

            if (!p.waitFor(timeout, TimeUnit.SECONDS)) {
                p.destroyForcibly()
                p.waitFor(5, TimeUnit.SECONDS)
                log(logger, 'warn', "${bin} rewrite did not finish within ${timeout} s and was killed; the domain XML is left as CloudStack built it")
                return xml
            }
            [writer, outReader, errReader].each { it.join(5000) }
            int code = p.exitValue()
            String stderr = new String(err.toByteArray(), 'UTF-8').trim()
            if (code != 0) {
                log(logger, 'warn', "${bin} rewrite exited with status ${code}; the domain XML is left as CloudStack built it" +
                        (stderr ? ": ${stderr}" : ''))
                return xml
            }
            String result = new String(out.toByteArray(), 'UTF-8')
            if (result.trim().isEmpty()) {
                log(logger, 'warn', "${bin} rewrite printed nothing; the domain XML is left as CloudStack built it")
                return xml
            }
            if (stderr) {
                log(logger, 'info', stderr)
            }
            if (result != xml) {
                log(logger, 'info', 'domain XML rewritten to the host CPU policy')
            }
            return result
        } catch (Throwable e) {
            if (proc != null) {
                try { proc.destroyForcibly() } catch (Throwable ignored) { }
            }
            log(logger, 'warn', "rewrite failed (${e.class.name}: ${e.message}); the domain XML is left as CloudStack built it")
            return xml
        }
    }
}

new VirtCpuPolicyTransformer()
